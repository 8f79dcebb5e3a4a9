"""Renders the sampler's latest snapshot as fresh Prometheus metric families on every scrape.

No global Gauges: series of a process that ended, or of a GPU that fell off the bus, are simply not
rendered any more. Each section is guarded, because prometheus_client turns one exception in
collect() into an HTTP 500 for the whole scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from gpulens.core import metrics as m
from gpulens.core.exposition import Exposition, Families
from gpulens.core.pods import PodRef
from gpulens.exporter.sampler import Sampler, Snapshot

log = logging.getLogger(__name__)


class ExporterCollector:
    """prometheus_client collector over a Sampler."""

    def __init__(self, sampler: Sampler, version: str, source_label: str, clock: Callable[[], float] = time.monotonic):
        self.sampler = sampler
        self.version = version
        self.source_label = source_label
        self.clock = clock
        #: What /metrics serves: rendered once per sample (and at least once a second, for the sample's age).
        self.exposition = Exposition(self._gather, lambda: self.sampler.snapshot, clock=clock)

    def describe(self) -> list:
        # Metric names depend on the hardware; an empty describe() keeps registration from calling collect().
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._gather().metric_families()

    def render_text(self, openmetrics: bool = False) -> bytes:
        """/metrics in the Prometheus text format (or OpenMetrics), rendered now."""
        return self._gather().text(openmetrics).encode()

    def _gather(self) -> Families:
        snapshot = self.sampler.snapshot
        out = Families()
        for section in (self._self_metrics, self._devices, self._processes, self._pods):
            try:
                section(snapshot, out)
            except Exception:  # never let one section turn the scrape into a 500
                log.exception("rendering %s failed; the rest of the scrape is served", section.__name__)
        return out

    def _self_metrics(self, snapshot: Snapshot, out: Families) -> None:
        out.add(m.BUILD_INFO, (self.version, self.source_label), 1)
        for name, status in snapshot.collectors.items():
            out.add(m.COLLECTOR_SUCCESS, (name,), 1 if status.success else 0)
            out.add(m.COLLECTOR_DURATION, (name,), status.duration_seconds)
            out.add(m.COLLECTOR_FAILURES, (name,), status.failures)
            out.add(m.COLLECTOR_ERRORS, (name,), status.errors)
        if snapshot.node is not None:
            out.add(m.SAMPLE_AGE, (), max(0.0, self.clock() - snapshot.taken_at))
        out.add(m.SAMPLE_INTERVAL, (), self.sampler.interval)

    def _devices(self, snapshot: Snapshot, out: Families) -> None:
        node = snapshot.node
        if node is None:
            return
        if node.driver_version:
            out.add(m.DRIVER_INFO, (node.driver_version, node.nvml_version), 1)
        gpus = [d for d in node.devices if d.mig_mode != "instance"]
        out.add(m.GPUS_EXPECTED, (), len(gpus))
        out.add(m.GPUS_VISIBLE, (), sum(1 for d in gpus if d.up))
        fed_by: dict[tuple[str, str], int] = {}
        for d in node.devices:
            ids = (d.gpu, d.uuid)
            out.add(m.GPU_UP, ids, 1 if d.up else 0)
            if not d.up:
                continue
            for spec in d.values:
                key = (spec.name, d.sources.get(spec, self.source_label))
                fed_by[key] = fed_by.get(key, 0) + 1
            out.add(m.GPU_INFO, ids + (d.model, d.pci_bus_id, d.mig_mode, d.mig_profile, d.parent_uuid), 1)
            for spec, series in d.values.items():
                for extra, value in series.items():
                    out.add(spec, ids + extra, value)
            if d.clock_event_reasons is not None:
                for reason, bit in m.CLOCK_EVENT_REASONS.items():
                    out.add(m.CLOCK_EVENT_ACTIVE, ids + (reason,), 1 if d.clock_event_reasons & bit else 0)
            counters = snapshot.device_counters.get(d.uuid)
            if counters is not None:
                if d.activity() is not None:
                    out.add(m.BUSY_SECONDS, ids, counters.busy)
                    out.add(m.IDLE_SECONDS, ids, counters.idle)
                if counters.sm_active is not None:
                    out.add(m.SM_ACTIVE_SECONDS, ids, counters.sm_active)
                for reason, seconds in counters.clock_events.items():
                    out.add(m.CLOCK_EVENT_SECONDS, ids + (reason,), seconds)
            shape = snapshot.shapes.get(d.uuid)
            if shape is not None and shape.count:
                out.add_histogram(m.ACTIVITY, ids, shape)
                out.add(m.ACTIVITY_TRANSITIONS, ids, shape.transitions)
                out.add(m.STEADY_BURSTS, ids, shape.steady_bursts)
        for (metric, source), count in sorted(fed_by.items()):
            out.add(m.METRIC_SOURCE, (metric, source), count)
        gpu_of = {d.uuid: d.gpu for d in node.devices if d.up}
        for uuid, peer, level, p2p in node.topology:
            if uuid in gpu_of and peer in gpu_of:
                out.add(m.TOPOLOGY, (gpu_of[uuid], uuid, peer, level, p2p), 1)

    def _processes(self, snapshot: Snapshot, out: Families) -> None:
        if snapshot.node is None:
            return
        for d in snapshot.node.devices:
            if not d.up:
                continue
            for p in d.processes:
                pod = p.pod or _NO_POD
                ids = (d.gpu, d.uuid, str(p.pid), pod.namespace, pod.pod, pod.container)
                out.add(m.PROCESS_INFO, ids + (p.command, p.container_id), 1)
                if p.memory_used_bytes is not None:
                    out.add(m.PROCESS_MEMORY_USED, ids, p.memory_used_bytes)
                if p.utilization is not None:
                    out.add(m.PROCESS_UTILIZATION, ids, p.utilization)
                    counters = snapshot.process_counters.get((d.uuid, p.pid))
                    if counters is not None:
                        out.add(m.PROCESS_BUSY_SECONDS, ids, counters.busy)
                        out.add(m.PROCESS_IDLE_SECONDS, ids, counters.idle)

    def _pods(self, snapshot: Snapshot, out: Families) -> None:
        node, resolved = snapshot.node, snapshot.attribution
        if node is None:
            return
        if resolved is not None:
            for reason, count in resolved.unmapped.items():
                out.add(m.KUBELET_UNMAPPED, (reason,), count)
        for d in node.devices:
            if not d.up:
                continue
            if resolved is not None and resolved.pods_by_uuid is not None:
                holders = resolved.pods_by_uuid.get(d.uuid, ())
                out.add(m.GPU_PODS, (d.gpu, d.uuid), len({(p.namespace, p.pod) for p in holders}))
                for pod in holders:
                    out.add(m.GPU_POD_INFO, (d.gpu, d.uuid, pod.namespace, pod.pod, pod.container), 1)
            memory: dict[PodRef, float] = {}
            share: dict[PodRef, float] = {}
            for p in d.processes:
                if p.pod is None:
                    continue
                if p.memory_used_bytes is not None:
                    memory[p.pod] = memory.get(p.pod, 0.0) + p.memory_used_bytes
                if p.utilization is not None:
                    share[p.pod] = share.get(p.pod, 0.0) + p.utilization
            for pod, value in memory.items():
                out.add(m.POD_MEMORY_USED, (d.gpu, d.uuid, pod.namespace, pod.pod, pod.container), value)
            for pod, value in share.items():
                out.add(m.POD_UTILIZATION, (d.gpu, d.uuid, pod.namespace, pod.pod, pod.container), value)
        gpu_of = {d.uuid: d.gpu for d in node.devices if d.up}
        for (uuid, pod), seconds in snapshot.pod_counters.items():
            if uuid in gpu_of:
                out.add(m.POD_BUSY_SECONDS, (gpu_of[uuid], uuid, pod.namespace, pod.pod, pod.container), seconds)
        for (uuid, pod), shape in snapshot.pod_shapes.items():
            if uuid in gpu_of and shape.count:
                out.add_histogram(m.POD_ACTIVITY, (gpu_of[uuid], uuid, pod.namespace, pod.pod, pod.container), shape)


_NO_POD = PodRef("", "", "")
