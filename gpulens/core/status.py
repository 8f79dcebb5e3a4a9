"""How gpulens' long-running parts report on themselves: collector status, once-only problem logs, and
the guard that keeps a loop alive through its own bugs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CollectorStatus:
    """Outcome of a collector's last run, rendered as gpulens_exporter_collector_*{collector}."""

    success: bool = False
    duration_seconds: float = 0.0
    #: Runs that failed for a reason foreseen (the source unreachable, an answer refused).
    failures: int = 0
    #: Runs that failed unexpectedly (a bug), counted by the collector's LoopGuard.
    errors: int = 0


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


#: The longest wait between two steps of a loop whose steps keep failing.
MAX_BACKOFF_SECONDS = 120.0


def backoff(interval: float, failures: int) -> float:
    """Seconds to wait before a loop's next step: `interval`, doubled for each step that failed in a row,
    at most MAX_BACKOFF_SECONDS (or `interval`, if longer)."""
    if not failures:
        return interval
    return min(interval * 2 ** min(failures, 30), max(interval, MAX_BACKOFF_SECONDS))


class LoopGuard:
    """Keeps one long-running loop alive through its own bugs: an unexpected exception in a step is
    logged once with its traceback (and once when steps succeed again), counted, and the loop waits
    longer before the next step, doubling up to MAX_BACKOFF_SECONDS so that a bug that repeats does
    not spin. The loop never ends on an exception."""

    def __init__(self, logger: logging.Logger, doing: str):
        self.doing = doing  # what a step does, for the log: "sampling the GPUs"
        self.errors = 0
        self._failing = 0  # consecutive failed steps
        self._problems = ProblemLog(logger)

    def call(self, step: Callable[[], object]) -> bool:
        """Run `step`; False if it raised."""
        try:
            step()
        except Exception:
            self.errors += 1
            self._failing += 1
            self._problems.problem(
                "unexpected",
                f"unexpected error {self.doing} (a bug: please report it with this traceback); retrying",
                exc_info=True,
            )
            return False
        self._failing = 0
        self._problems.resolved("unexpected", f"{self.doing} succeeds again")
        return True

    def delay(self, interval: float) -> float:
        """Seconds to wait before the next step (see backoff)."""
        return backoff(interval, self._failing)
