"""Text as every output can take it: the one rule for what user input may carry into output.

ssh configs, ``ssh -G``'s answers, paths and arguments are decoded with ``surrogateescape``, so
a stray byte travels as a lone surrogate, which no UTF-8 writer accepts; a control character
would break the one line a message is, or drive the terminal. Each JSON value leaving the
process passes through ``writable`` (JSON escapes controls itself), each line of text (stderr,
the termination log, the dry-run plan) through ``printable``.
"""

from __future__ import annotations

__all__ = ["printable", "writable"]

# C0 (but tab), DEL and C1: shown as escapes, as the stray bytes are.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x09}


def writable(text: str) -> str:
    """``text`` with each byte that was not UTF-8 shown as ``\\x9b`` (ssh shows ``\\233``)."""
    if text.isascii():  # nearly every value: no copy
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding of bytes made: shown as \udXXX
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def printable(line: str) -> str:
    """``line`` as ``writable`` makes it, each control character also shown as ``\\x0b``."""
    if line.isascii() and line.isprintable():  # nearly every line: no copy
        return line
    return writable(line).translate(_CONTROLS)
