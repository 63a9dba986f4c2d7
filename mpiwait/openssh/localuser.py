"""The local account as ssh sees it; light to import (--list-ready needs it on every call)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LocalUser:
    """The local account as ssh sees it: its passwd entry, not $HOME or $USER."""

    name: str
    home: str
    # False for a uid with no passwd entry (OpenShift's arbitrary uids without nss_wrapper):
    # ssh itself then exits with "No user exists for uid N", so mpirun cannot work either.
    in_passwd: bool = True

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> LocalUser:
        env = os.environ if environ is None else environ
        uid = os.getuid()
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            name = env.get("USER") or env.get("LOGNAME") or str(uid)
            return cls(name=name, home=env.get("HOME") or "/", in_passwd=False)
        return cls(name=entry.pw_name, home=entry.pw_dir or "/")
