"""The NVML choke point: what an NVML error means, decided in one place for every call, and the older
versions of a call that a driver may have instead of the newest.

Every NVML call of the exporter (pynvml's wrappers, the raw C calls of buffers.py, GPM, the XID event
wait) has its failure sorted by `NvmlCalls.sort`, as nvitop's `nvmlQuery` does for nvitop:
- NOT_SUPPORTED, or FUNCTION_NOT_FOUND (a driver older than the call): UNSUPPORTED. The GPU or driver
  does not have it: its metric is omitted, never exported as 0 or NaN.
- NOT_FOUND: NOTHING to report (an empty sample buffer, an empty MIG slot): a valid, empty answer.
- TIMEOUT: an event wait that saw no event.
- GPU_IS_LOST: `DeviceLost` is raised. The GPU fell off the bus: it is reported down.
- anything else: FAILED, logged once (not every second) until that call succeeds on that GPU, and
  counted against the collector that made the call.

`Versioned` makes a call in the newest version the driver has. Drivers keep the older entry points when
they add a newer one, and fleets run driver branches several years apart: a driver without
`nvmlDeviceGetComputeRunningProcesses_v3` has `_v2` (or only the first version), one without
`nvmlDeviceGetMemoryInfo_v2` has the first, one without `nvmlDeviceGetCurrentClocksEventReasons` has
`...ThrottleReasons` under its older name. The first version a driver has is used from then on.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpulens.core.status import CollectorStatus, ProblemLog

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    """What an NVML error means (see the module docstring)."""

    UNSUPPORTED = "unsupported"
    NOTHING = "nothing"
    TIMEOUT = "timeout"
    FAILED = "failed"


class DeviceLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST."""


@dataclass(frozen=True)
class Version:
    """One version of a call: its NVML name (for the log) and the function making it."""

    name: str
    call: Callable[..., Any]


class Versioned:
    """One NVML call in the versions drivers may have, newest first. A version the driver lacks
    (FUNCTION_NOT_FOUND, or ARGUMENT_VERSION_MISMATCH for a versioned structure it does not know) is
    dropped, once, with a log line, and the next is tried; the last one's failure is the call's."""

    def __init__(self, nvml: Any, versions: Sequence[Version]):
        self._nvml = nvml
        self._versions = list(versions)
        self._missing = (nvml.NVML_ERROR_FUNCTION_NOT_FOUND, nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)

    @property
    def version(self) -> str:
        """The NVML name of the version in use (the newest the driver has, as far as known)."""
        return self._versions[0].name

    def __call__(self, *args: Any) -> Any:
        while True:
            version = self._versions[0]
            try:
                return version.call(*args)
            except self._nvml.NVMLError as e:
                if e.value not in self._missing or len(self._versions) == 1:
                    raise
                self._versions.pop(0)
                log.info("the NVIDIA driver has no %s (%s): using %s", version.name, e, self._versions[0].name)


class NvmlCalls:
    """Sorts every NVML failure (`sort`) and times and judges the exporter's NVML read groups, the
    collectors of `--collector.NAME` (`collector`), for their gpulens_exporter_collector_* series."""

    def __init__(self, nvml: Any, problems: ProblemLog, collectors: Sequence[str] = ()):
        self._nvml = nvml
        #: Where failures are logged, once each until they clear.
        self.problems = problems
        self._unsupported = (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        #: Whether a read has failed in the collector run under way (the sampler's thread).
        self._failed = False
        #: Each collector's duration (seconds) and failure in the tick being read, then its last status.
        self._tick: dict[str, list[float]] = {}
        #: Every enabled collector is reported, in the order given, from the start: one with nothing to
        #: read (GPM on a GPU before Hopper) succeeds in no time.
        self.statuses = {name: CollectorStatus(True, 0.0, 0) for name in collectors}

    def sort(self, error: Any, what: str, device: str = "") -> Outcome:
        """What `error` (a pynvml NVMLError) of the call `what` on GPU `device` means. Raises
        DeviceLost for GPU_IS_LOST where a GPU is named; a failure is logged once per call and GPU."""
        code = error.value
        if code in self._unsupported:
            return Outcome.UNSUPPORTED
        if code == self._nvml.NVML_ERROR_NOT_FOUND:
            return Outcome.NOTHING
        if code == self._nvml.NVML_ERROR_TIMEOUT:
            return Outcome.TIMEOUT
        if code == self._nvml.NVML_ERROR_GPU_IS_LOST and device:
            raise DeviceLost() from error
        self._failed = True
        where = f"GPU {device}: " if device else ""
        self.problems.problem(f"{device}:{what}", f"{where}{what} failed: {error}")
        return Outcome.FAILED

    def mark_failed(self) -> None:
        """Count a failure seen elsewhere (the XID watcher's thread) against the current collector."""
        self._failed = True

    def call(self, fn: Callable[..., Any], *args: Any, device: str = "") -> Any:
        """`fn(*args)`, or None when it fails (sorted as above; DeviceLost raised)."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as e:
            self.sort(e, fn.version if isinstance(fn, Versioned) else fn.__name__, device)
            return None

    def collector(self, name: str) -> _CollectorRun:
        """A context timing the reads inside as collector `name`'s and noting whether any of them
        failed; a collector runs once per GPU in a tick, and its status adds the runs up (`end_tick`)."""
        return _CollectorRun(self, name)

    def end_tick(self) -> None:
        """Publish the tick's statuses: a collector succeeded if none of its reads failed."""
        for name, (seconds, failed) in self._tick.items():
            previous = self.statuses.get(name, CollectorStatus())
            self.statuses[name] = CollectorStatus(not failed, seconds, previous.failures + int(failed))
        self._tick = {}


class _CollectorRun:
    """One run of a collector (NvmlCalls.collector): a plain context manager, as it wraps every read
    group of every GPU every second."""

    __slots__ = ("_calls", "_name", "_outer_failed", "_started")

    def __init__(self, calls: NvmlCalls, name: str):
        self._calls, self._name = calls, name

    def __enter__(self) -> None:
        calls = self._calls
        self._outer_failed, calls._failed = calls._failed, False
        self._started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        calls = self._calls
        spent = calls._tick.setdefault(self._name, [0.0, 0.0])
        spent[0] += time.perf_counter() - self._started
        spent[1] = max(spent[1], float(calls._failed))
        calls._failed = self._outer_failed
