"""paramiko as mpiwait uses it: the behaviour it relies on that paramiko does not promise (private
attributes, the shape of its exceptions, its imports of invoke and importlib.metadata, the
handler of MSG_DEBUG it overrides), in one place.

tests/integration/test_probes_paramiko.py pins each of these against the installed paramiko (and
CI runs it against the oldest allowed one too), so that a release that changes one fails there,
not as a probe that silently misreports. Importing this module imports no paramiko; it must be
imported before paramiko is (probe/stages/ and probe/keys.py do), so that paramiko's own
import skips invoke and importlib.metadata.
"""

from __future__ import annotations

import functools
import importlib
import logging
import socket
import sys
import types
from typing import TYPE_CHECKING, Literal

from mpiwait.about import dist_info_version

if TYPE_CHECKING:
    import paramiko

# paramiko imports invoke only for its own ssh_config `Match exec`, which mpiwait never uses
# (openssh/evaluate.py runs Match exec itself): without it paramiko's import takes about half
# as long (docs/design-decisions.md). None in sys.modules makes `import invoke` raise.
sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]  # None blocks an import


class _MetadataUntilAsked(types.ModuleType):
    """Stands in for importlib.metadata until something asks it for anything; the first
    question puts the real module back. paramiko 4 asks, on import, ``metadata.version(
    "paramiko")``: importing importlib.metadata for that (email, zipfile, csv, ...) and its
    search of sys.path are a large part of a wait's start-up (docs/performance.md).
    ``version`` reads the dist-info directory's name, as --version does (about.py), else asks
    the real module; any other name is the real module's. So whoever asks, paramiko or not,
    gets what importlib.metadata would answer."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)  # the import system's and introspection's questions
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        if getattr(importlib, "metadata", None) is self:
            delattr(importlib, "metadata")
        if name == "version":
            return _version
        from importlib import metadata

        return getattr(metadata, name)


def _version(name: str) -> str:
    found = dist_info_version(name)
    if found is not None:
        return found
    from importlib import metadata

    return metadata.version(name)


if "importlib.metadata" not in sys.modules and "paramiko" not in sys.modules:
    _stand_in = _MetadataUntilAsked("importlib.metadata")
    sys.modules["importlib.metadata"] = _stand_in
    # what `from importlib import metadata` reads first
    importlib.metadata = _stand_in

# paramiko logs every failed handshake at ERROR, with a traceback; without a handler of ours
# those records reach logging's last resort, on stderr among our lines (and inside JSON
# output). Each failure comes back as an exception or an inactive transport and is reported
# once, as an Outcome.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def transport(sock: socket.socket, timeout: float) -> paramiko.Transport:
    """A client transport on ``sock`` whose every wait (banner, key exchange, auth) is bounded
    by ``timeout``: paramiko's own 15 s banner and 30 s auth defaults would let one silent
    host hold a probe slot far longer than the per-stage timeout promised to the user."""
    t = _transport_class()(sock)
    t.banner_timeout = timeout
    t.handshake_timeout = timeout
    t.auth_timeout = timeout
    return t


@functools.cache
def _transport_class() -> type[paramiko.Transport]:
    """paramiko's Transport, except that a MSG_DEBUG (sshd sends two after every login) is
    decoded only when paramiko's logger would log it: paramiko builds the line byte by byte
    first (``util.safe_string``), and mpiwait discards paramiko's records."""
    import paramiko

    class Transport(paramiko.Transport):
        def _parse_debug(self, m: paramiko.Message) -> None:
            if self.logger.isEnabledFor(logging.DEBUG):
                super()._parse_debug(m)  # type: ignore[misc]  # private: not in the stubs

    return Transport


def kex_done(t: paramiko.Transport) -> bool:
    """Whether the first key exchange finished: ``start_client`` returns silently, without an
    exception, when its own timeout passes first."""
    return bool(t.initial_kex_done)


def banner_seen(t: paramiko.Transport) -> bool:
    """Whether the server's SSH banner arrived (``remote_version`` stays empty until then)."""
    return bool(t.remote_version)


def before_banner(exc: BaseException) -> Literal["closed", "silent"] | None:
    """Why ``start_client`` failed before a banner: the server closed the connection, or stayed
    silent; None when neither can be told.

    paramiko raises a plain SSHException ("Error reading SSH protocol banner...") for both; no
    subclass or attribute says which. It is raised while handling the socket's own error, which
    ``__context__`` keeps (EOFError or a reset for a close, a timeout for silence); a reset that
    hits the sending of our own banner comes as the OSError itself.
    """
    cause = exc if isinstance(exc, (EOFError, OSError)) else exc.__context__
    if isinstance(cause, (EOFError, ConnectionError)):
        return "closed"
    if isinstance(cause, TimeoutError):  # socket.timeout is TimeoutError
        return "silent"
    return None


def prefer_host_key_types(t: paramiko.Transport, known: tuple[str, ...]) -> None:
    """Ask first for the host key types in ``known``, as ssh does (order_hostkeyalgs)."""
    if not known:
        return
    options = t.get_security_options()
    offered = list(options.key_types)
    # rsa-sha2-256/512 are signatures made with an ssh-rsa key.
    first = [a for a in offered if ("ssh-rsa" if a.startswith("rsa-sha2-") else a) in known]
    if first:
        options.key_types = first + [a for a in offered if a not in first]


def exit_status(channel: paramiko.Channel, timeout: float) -> int | None:
    """The remote command's exit status, or None if it did not finish within ``timeout``
    (``recv_exit_status`` alone would wait forever)."""
    if not channel.status_event.wait(timeout):
        return None
    return channel.recv_exit_status()
