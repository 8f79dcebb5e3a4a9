"""The fixed-rate sampler: reads the source every --sampler.interval and integrates time.

Why a sampler at all, when Prometheus scrapes? Because a gauge scraped every 30 s shows one instant
in 30 s, and a GPU that is busy 300 ms of every second looks either 100% or 0% busy depending on when
the scrape lands. The sampler reads at a fixed rate (1 s by default, NVML's own averaging period) and
adds activity x interval into counters (busy seconds, SM-active seconds, idle seconds, seconds per
clock-event reason), so that rate() over any window is the true average however rarely Prometheus
scrapes.

The sampler never touches prometheus_client. It publishes an immutable Snapshot; the collector
renders fresh metric families from the latest one on each scrape. A hung source blocks only the
sampler thread: scrapes keep serving the last complete snapshot and its age.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpulens.core import metrics as m
from gpulens.core.activity import IDLE_ACTIVITY, ActivityShape, ShapeCounts
from gpulens.core.pods import PodRef
from gpulens.core.status import CollectorStatus, LoopGuard, ProblemLog
from gpulens.exporter.attribution.attributor import Attribution, Resolved, resolve
from gpulens.exporter.sources.base import NodeSample, ProcessSample, Source

log = logging.getLogger(__name__)


@dataclass
class DeviceCounters:
    """Seconds integrated by the sampler for one device (by uuid)."""

    busy: float = 0.0
    sm_active: float | None = None  # None until the device reports SM activity
    idle: float = 0.0
    clock_events: dict[str, float] = field(default_factory=dict)


@dataclass
class ProcessCounters:
    busy: float = 0.0
    idle: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    """Everything a scrape renders. Replaced as a whole, never mutated after publication."""

    node: NodeSample | None
    taken_at: float  # time.monotonic() when the sample completed
    device_counters: dict[str, DeviceCounters]
    process_counters: dict[tuple[str, int], ProcessCounters]
    collectors: dict[str, CollectorStatus]
    # Busy seconds per (device uuid, pod), for pods holding the device or running processes on it.
    pod_counters: dict[tuple[str, PodRef], float] = field(default_factory=dict)
    attribution: Resolved | None = None  # None: no attribution configured
    #: The shape of each device's activity (by uuid) and each pod's on a device, since the start.
    shapes: dict[str, ShapeCounts] = field(default_factory=dict)
    pod_shapes: dict[tuple[str, PodRef], ShapeCounts] = field(default_factory=dict)


class Sampler:
    """Samples `source` every `interval` seconds on a background thread, attributing processes and
    devices to pods through `attribution` when one is given."""

    #: A gap longer than this many intervals (a hung driver call, a suspended process) is not
    #: integrated: nobody knows what the GPU did meanwhile, and counters must not invent it.
    MAX_GAP_INTERVALS = 2.0

    def __init__(
        self,
        source: Source,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        attribution: Attribution | None = None,
        on_sample: Callable[[Snapshot], None] | None = None,
    ):
        self.source = source
        self.on_sample = on_sample  # called with each new snapshot (the --record trace writer)
        self.interval = interval
        self.clock = clock
        self.attribution = attribution
        self._device_counters: dict[str, DeviceCounters] = {}
        self._process_counters: dict[tuple[str, int], ProcessCounters] = {}
        self._pod_counters: dict[tuple[str, PodRef], float] = {}
        self._shapes: dict[str, ActivityShape] = {}
        self._pod_shapes: dict[tuple[str, PodRef], ActivityShape] = {}
        self._last_seen: dict[str, float] = {}
        #: The timestamp of the last driver sample integrated, per device uuid and per (uuid, pod).
        self._last_sample: dict[object, float] = {}
        self._status = CollectorStatus()
        self._problems = ProblemLog(log)
        self._guard = LoopGuard(log, "sampling the GPUs")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot = Snapshot(None, clock(), {}, {}, self._collectors())

    def _collectors(self) -> dict[str, CollectorStatus]:
        errors = self._guard.errors + self.source.loop_errors()
        collectors = {self.source.name: replace(self._status, errors=errors), **self.source.statuses()}
        if self.attribution is not None and self.attribution.name:
            collectors[self.attribution.name] = self.attribution.state().status
        return collectors

    def tick(self) -> Snapshot:
        """Take one sample, integrate it, publish and return the new snapshot."""
        started = self.clock()
        try:
            node = self.source.sample()
        except Exception as e:  # the source as a whole failed this tick; keep the last good data
            self._status = replace(
                self._status, success=False, duration_seconds=self.clock() - started, failures=self._status.failures + 1
            )
            self._problems.problem("source", f"{self.source.name} source failed: {e}; serving the last good sample")
            self.snapshot = replace(self.snapshot, collectors=self._collectors())
            return self.snapshot
        resolved = self._attribute(node)
        now = self.clock()
        self._problems.resolved("source", f"{self.source.name} source recovered")
        self._integrate(node, now, resolved)
        self._status = replace(self._status, success=True, duration_seconds=now - started)
        self.snapshot = Snapshot(
            node,
            now,
            dict(self._device_counters),
            dict(self._process_counters),
            self._collectors(),
            dict(self._pod_counters),
            resolved,
            {uuid: shape.counts() for uuid, shape in self._shapes.items()},
            {key: shape.counts() for key, shape in self._pod_shapes.items()},
        )
        if self.on_sample is not None:
            self.on_sample(self.snapshot)
        return self.snapshot

    def _attribute(self, node: NodeSample) -> Resolved | None:
        """Put each process in its pod and match the kubelet's allocations to this sample's devices."""
        if self.attribution is None:
            return None
        for device in node.devices:
            for process in device.processes:
                if process.pod is None and not process.container_id:
                    process.pod, process.container_id = self.attribution.process_pod(process.pid)
        return resolve(self.attribution.state(), node.devices)

    def _integrate(self, node: NodeSample, now: float, resolved: Resolved | None) -> None:
        max_gap = self.MAX_GAP_INTERVALS * self.interval
        live_processes: set[tuple[str, int]] = set()
        live_pods: set[tuple[str, PodRef]] = set()
        if resolved is not None and resolved.pods_by_uuid:
            live_pods = {(uuid, pod) for uuid, pods in resolved.pods_by_uuid.items() for pod in pods}
        for device in node.devices:
            if not device.up:
                self._last_seen.pop(device.uuid, None)
                self._last_sample.pop(device.uuid, None)
                continue
            previous = self._last_seen.get(device.uuid)
            self._last_seen[device.uuid] = now
            dt = 0.0 if previous is None or now - previous > max_gap else now - previous
            counters = self._device_counters.setdefault(device.uuid, DeviceCounters())
            shape = self._shapes.setdefault(device.uuid, ActivityShape())
            if dt == 0.0:
                shape.gap()
            activity = device.activity()
            if device.activity_samples is not None:
                # The driver's own samples: busy time exact at its rate, each sample in the shape once.
                for value, seconds in self._observe_samples(device.uuid, device.activity_samples, shape, max_gap):
                    counters.busy += value * seconds
                    if value < IDLE_ACTIVITY:
                        counters.idle += seconds
            elif activity is not None:
                counters.busy += activity * dt
                if activity < IDLE_ACTIVITY:
                    counters.idle += dt
                shape.observe(now, activity)
            sm_active = device.get(m.SM_ACTIVE)
            if sm_active is not None:
                counters.sm_active = (counters.sm_active or 0.0) + sm_active * dt
            reasons = device.clock_event_reasons
            if reasons is not None:
                events = counters.clock_events
                if not events:  # every reason has its series from the start, at 0 s
                    events.update(dict.fromkeys(m.CLOCK_EVENT_REASONS, 0.0))
                if reasons and dt:
                    for reason, bit in m.CLOCK_EVENT_REASONS.items():
                        if reasons & bit:
                            events[reason] += dt
            self._observe_pods(device.uuid, device.processes, now, dt, max_gap)
            for process in device.processes:
                key = (device.uuid, process.pid)
                live_processes.add(key)
                # get first: setdefault would build a ProcessCounters for every process every second
                pc = self._process_counters.get(key) or self._process_counters.setdefault(key, ProcessCounters())
                if process.utilization is not None:
                    pc.busy += process.utilization * dt
                    if process.utilization < IDLE_ACTIVITY:
                        pc.idle += dt
                if process.pod is not None:
                    pod_key = (device.uuid, process.pod)
                    live_pods.add(pod_key)
                    self._pod_counters[pod_key] = (
                        self._pod_counters.get(pod_key, 0.0) + (process.utilization or 0.0) * dt
                    )
        # Processes that ended, and pods that neither hold the device nor run on it, take their
        # series with them.
        for process_key in list(self._process_counters):
            if process_key not in live_processes:
                del self._process_counters[process_key]
        for pod_key in list(self._pod_counters):
            if pod_key not in live_pods:
                del self._pod_counters[pod_key]
        for pod_key in live_pods:
            self._pod_counters.setdefault(pod_key, 0.0)
        for pod_key in list(self._pod_shapes):
            if pod_key not in live_pods:
                del self._pod_shapes[pod_key]
                self._last_sample.pop(pod_key, None)

    def _observe_samples(
        self, key: object, samples: list[tuple[float, float]], shape: ActivityShape, max_gap: float
    ) -> list[tuple[float, float]]:
        """Put new driver samples in `shape`; return (value, seconds it stands for) for each one whose
        predecessor is known and near: the first sample, and one after a gap, stand for no time."""
        previous = self._last_sample.get(key)
        spans = []
        for timestamp, value in samples:
            if previous is not None and timestamp <= previous:
                continue  # already seen (a source that cannot filter by timestamp)
            if previous is not None and timestamp - previous > max_gap:
                shape.gap()
                previous = None
            shape.observe(timestamp, value)
            if previous is not None:
                spans.append((value, timestamp - previous))
            previous = timestamp
        if previous is not None:
            self._last_sample[key] = previous
        return spans

    def _observe_pods(self, uuid: str, processes: list[ProcessSample], now: float, dt: float, max_gap: float) -> None:
        """Each pod's share of the device, per driver sample (summed over its processes), in its shape."""
        if not any(process.pod for process in processes):
            return
        by_pod: dict[PodRef, dict[float, float]] = {}
        for process in processes:
            if process.pod is None:
                continue
            samples = process.samples
            if samples is None:
                samples = [] if process.utilization is None else [(now, process.utilization)]
            pod_samples = by_pod.setdefault(process.pod, {})
            for timestamp, value in samples:
                pod_samples[timestamp] = pod_samples.get(timestamp, 0.0) + value
        for pod, samples_by_time in by_pod.items():
            key = (uuid, pod)
            shape = self._pod_shapes.setdefault(key, ActivityShape())
            if dt == 0.0:
                shape.gap()
            self._observe_samples(key, sorted(samples_by_time.items()), shape, max_gap)

    def run(self) -> None:
        """Sample at a fixed rate until stop(). Ticks missed because a sample overran are skipped,
        not bunched up. A tick that raises (a bug) is counted and retried after a backoff; the snapshot
        then ages, so /healthz fails if it never recovers."""
        next_tick = self.clock()
        while not self._stop.is_set():
            if not self._guard.call(self.tick):
                self.snapshot = replace(self.snapshot, collectors=self._collectors())
            next_tick += self._guard.delay(self.interval)
            now = self.clock()
            if next_tick < now:
                next_tick = now + self.interval - (now - next_tick) % self.interval
            self._stop.wait(next_tick - now)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="gpulens-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # A hung driver call cannot be interrupted; the thread is a daemon so exit is not blocked.
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
