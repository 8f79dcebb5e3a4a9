"""The `xid` collector: XID error events, counted per GPU and XID code.

XID errors arrive as NVML events. A watcher thread, started at the first discovery, registers every full
GPU for them, waits on the event set and counts every event, so repeated errors are counted, not
overwritten. Its own calls are sorted apart (a choke point of its own): its failures must not count
against whichever collector the sampler's thread is reading at that moment. The tick reads the counts.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import Counter
from typing import Any

from gpulens.core import metrics as m
from gpulens.core.status import LoopGuard
from gpulens.exporter.sources.base import DeviceSample
from gpulens.exporter.sources.nvml.calls import NvmlCalls, Outcome
from gpulens.exporter.sources.nvml.device import Collector, Device

log = logging.getLogger(__name__)

#: How long one wait for an event lasts (ms): also how long the exporter's stop may wait for the watcher.
EVENT_WAIT_MS = 500


class Xid(Collector):
    name = "xid"
    help = "XID error events"

    def __init__(self, nvml: Any, calls: NvmlCalls):
        super().__init__(nvml, calls)
        self._watcher_calls = NvmlCalls(nvml, calls.problems)
        self._counts: Counter[tuple[str, str]] = Counter()  # by (GPU UUID, XID code)
        self._lock = threading.Lock()
        self._watched: set[str] = set()  # the GPUs registered for XID events
        self._failing = False  # the watcher could not register a GPU, or its last wait failed
        self._stop = threading.Event()
        self._guard = LoopGuard(log, "watching for XID events")
        self._thread: threading.Thread | None = None

    def discovered(self, devices: list[Device]) -> None:
        if self._thread is None:  # the GPUs of the first enumeration are watched
            boards = [d for d in devices if d.is_board]
            self._thread = threading.Thread(target=self._watch, args=(boards,), name="gpulens-xid", daemon=True)
            self._thread.start()

    def read(self, d: Device, s: DeviceSample) -> None:
        if not d.is_board:
            return
        with self._lock:
            if self._failing:
                self.calls.mark_failed()
            s.xids_watched = d.uuid in self._watched
            for (uuid, xid), count in self._counts.items():
                if uuid == d.uuid:
                    s.set(m.XID_ERRORS, count, xid)

    def loop_errors(self) -> int:
        return self._guard.errors

    def close(self) -> None:
        self._stop.set()

    def _watch(self, boards: list[Device]) -> None:
        nvml, calls = self.nvml, self._watcher_calls
        event_set = calls.call(nvml.nvmlEventSetCreate)
        if event_set is None:
            self._failing = True  # logged by the choke point: XID events are unavailable
            return
        handles: dict[int, str] = {}
        unwatched = False
        for d in boards:
            try:
                nvml.nvmlDeviceRegisterEvents(d.handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except nvml.NVMLError as e:
                # A GPU that cannot be watched (UNSUPPORTED or not) leaves its XIDs unknown: a failure.
                calls.sort(e, f"nvmlDeviceRegisterEvents (GPU {d.gpu})")
                unwatched = True
                continue
            handles[_handle_key(d.handle)] = d.uuid
            with self._lock:
                self._watched.add(d.uuid)
        while not self._stop.is_set():
            if not self._guard.call(lambda: self._wait(event_set, handles, unwatched)):
                self._stop.wait(self._guard.delay(1.0))
        calls.call(nvml.nvmlEventSetFree, event_set)

    def _wait(self, event_set: Any, handles: dict[int, str], unwatched: bool) -> None:
        """Wait up to EVENT_WAIT_MS for one XID event and count it."""
        nvml = self.nvml
        try:
            event = nvml.nvmlEventSetWait(event_set, EVENT_WAIT_MS)
        except nvml.NVMLError as e:
            failed = self._watcher_calls.sort(e, "nvmlEventSetWait") is Outcome.FAILED
            self._failing = unwatched or failed
            if failed:
                self._stop.wait(1.0)
            return
        self._failing = unwatched
        uuid = handles.get(_handle_key(event.device))
        if uuid is not None and event.eventType == nvml.nvmlEventTypeXidCriticalError:
            with self._lock:
                self._counts[(uuid, str(event.eventData))] += 1


def _handle_key(handle: Any) -> int:
    """nvmlDevice_t handles are pointers; compare them by address."""
    return ctypes.cast(handle, ctypes.c_void_p).value or 0
