"""Every JSON record mpiwait emits in any test is held to docs/events.schema.json: ``start`` and
``run`` mark a run as JSON (``--log-format json`` or MPIWAIT_LOG_FORMAT=json), and ``finish``
validates each of its JSON lines (stderr: the log; stdout: the --dry-run plan). ``seen`` counts
the records validated per event, for the session's summary. jsonschema (a test extra) is imported
only when a JSON run is checked, so the library stays importable with Debian's python3."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "events.schema.json"

seen: Counter[str] = Counter()  # event -> records validated this session


def asks_for_json(args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether mpiwait's options (not COMMAND, after ``--``) choose the JSON log."""
    options = list(args[: list(args).index("--")] if "--" in args else args)
    choice = env.get("MPIWAIT_LOG_FORMAT", "")
    for i, word in enumerate(options):
        if word == "--log-format" and i + 1 < len(options):
            choice = options[i + 1]
        elif word.startswith("--log-format="):
            choice = word.split("=", 1)[1]
    return choice.strip().lower() == "json"


@cache
def validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(record: object) -> list[str]:
    """Why ``record`` does not fit the schema (empty when it does)."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(record)'}: {e.message}"
        for e in validator().iter_errors(record)
    ]


def check(stdout: str, stderr: str, what: object = "") -> None:
    """Every line of either stream that is a JSON object fits the schema. Other lines (a
    COMMAND's own output after the exec) are not mpiwait's and are left alone."""
    for stream, text in (("stdout", stdout), ("stderr", stderr)):
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not a JSON line (a COMMAND's output that happens to start with "{")
            found = problems(record)
            assert not found, f"{stream} record does not fit {SCHEMA.name}: {found}\n{line}\n{what}"
            seen[str(record.get("event"))] += 1
