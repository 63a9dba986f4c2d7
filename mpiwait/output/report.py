"""The reporter a run writes its events, notes and errors to: text lines for people or JSON
lines for machines (output/text.py, output/jsonl.py), on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from mpiwait.output.text import TextEvents
from mpiwait.settings import LogFormat
from mpiwait.wait.events import Event

if TYPE_CHECKING:  # the type only: the JSON writer is imported for --log-format json
    from mpiwait.output.jsonl import JsonEvents


@dataclass
class Reporter:
    """Writes events in the chosen format; ``-q`` keeps only errors and the summary."""

    log_format: LogFormat = LogFormat.TEXT
    quiet: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    _writer: TextEvents | JsonEvents = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.log_format is LogFormat.JSON:
            from mpiwait.output.jsonl import JsonEvents  # a text run never needs the JSON writer

            self._writer = JsonEvents(self.quiet, self.stream)
        else:
            self._writer = TextEvents(self.quiet, self.stream)

    def __call__(self, event: Event) -> None:
        self._writer(event)

    def info(self, message: str) -> None:
        self._writer.info(message)

    def error(self, message: str, hint: str | None = None, *, exit_code: int) -> None:
        self._writer.error(message, hint, exit_code=exit_code)
