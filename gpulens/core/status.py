"""How the exporter's parts report on themselves: collector status and once-only problem logs."""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass(frozen=True)
class CollectorStatus:
    """Outcome of a collector's last run, rendered as gpulens_exporter_collector_*{collector}."""

    success: bool = False
    duration_seconds: float = 0.0
    failures: int = 0


class ProblemLog:
    """Logs a problem once when it starts and once when it clears, never every tick."""

    def __init__(self, logger: logging.Logger):
        self._logger = logger
        self._active: set[str] = set()

    def problem(self, key: str, message: str, exc_info: bool = False) -> None:
        """Log `message` (with the exception being handled, if `exc_info`) unless `key` is already active."""
        if key not in self._active:
            self._active.add(key)
            self._logger.warning(message, exc_info=exc_info)

    def resolved(self, key: str, message: str) -> None:
        if key in self._active:
            self._active.discard(key)
            self._logger.warning(message)
