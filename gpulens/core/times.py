"""Times as gpulens writes them, one format per audience:

- rfc3339(): what a program reads (JSON, CSV, the API, logs, and error messages that name a time a flag
  takes back): "2026-11-21T10:00:00Z", as --since and --until and every reader of gpulens' files accept;
- for_people(): what a person reads (evidence, tables, pages): "2026-11-21 10:00:00 UTC".

Both in UTC to the second; a time that is not one (infinite, NaN, out of range) is written as its number.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(unix: float) -> str:
    """RFC 3339 in UTC to the second: "2026-11-21T10:00:00Z"."""
    return _formatted(unix, "%Y-%m-%dT%H:%M:%SZ")


def for_people(unix: float) -> str:
    """The date and time a person reads, in UTC to the second: "2026-11-21 10:00:00 UTC"."""
    return _formatted(unix, "%Y-%m-%d %H:%M:%S UTC")


def _formatted(unix: float, pattern: str) -> str:
    try:
        return datetime.fromtimestamp(unix, UTC).strftime(pattern)
    except (ValueError, OverflowError, OSError):
        return f"{unix:g}"
