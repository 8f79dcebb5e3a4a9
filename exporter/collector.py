"""Renders the sampler's latest snapshot as fresh Prometheus metric families on every scrape.

No global Gauges: series of a process that ended, or of a GPU that fell off the bus, are simply not
rendered any more. Each section is guarded, because prometheus_client turns one exception in
collect() into an HTTP 500 for the whole scrape.
"""
from __future__ import annotations

import logging
import time
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter import metric_specs as m
from exporter.sampler import Sampler, Snapshot

log = logging.getLogger(__name__)


class _Families:
    """Metric families created on first use, yielded in the order of the metric table."""

    def __init__(self):
        self._families: dict[m.MetricSpec, Metric] = {}

    def add(self, spec: m.MetricSpec, label_values: tuple[str, ...], value: float) -> None:
        family = self._families.get(spec)
        if family is None:
            cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            family = self._families[spec] = cls(spec.family_name, spec.help, labels=spec.labels)
        family.add_metric(label_values, value)

    def in_table_order(self) -> Iterator[Metric]:
        for spec in m.ALL:
            if spec in self._families:
                yield self._families[spec]


class ExporterCollector:
    """prometheus_client collector over a Sampler."""

    def __init__(self, sampler: Sampler, version: str, source_label: str, clock=time.monotonic):
        self.sampler = sampler
        self.version = version
        self.source_label = source_label
        self.clock = clock

    def describe(self) -> list:
        # Metric names depend on the hardware; an empty describe() keeps registration from calling collect().
        return []

    def collect(self) -> Iterator[Metric]:
        snapshot = self.sampler.snapshot
        out = _Families()
        for section in (self._self_metrics, self._devices, self._processes):
            try:
                section(snapshot, out)
            except Exception:  # never let one section turn the scrape into a 500
                log.exception("rendering %s failed; the rest of the scrape is served", section.__name__)
        yield from out.in_table_order()

    def _self_metrics(self, snapshot: Snapshot, out: _Families) -> None:
        out.add(m.BUILD_INFO, (self.version, self.source_label), 1)
        for name, status in snapshot.collectors.items():
            out.add(m.COLLECTOR_SUCCESS, (name,), 1 if status.success else 0)
            out.add(m.COLLECTOR_DURATION, (name,), status.duration_seconds)
            out.add(m.COLLECTOR_FAILURES, (name,), status.failures)
        if snapshot.node is not None:
            out.add(m.SAMPLE_AGE, (), max(0.0, self.clock() - snapshot.taken_at))
        out.add(m.SAMPLE_INTERVAL, (), self.sampler.interval)

    def _devices(self, snapshot: Snapshot, out: _Families) -> None:
        node = snapshot.node
        if node is None:
            return
        if node.driver_version:
            out.add(m.DRIVER_INFO, (node.driver_version, node.nvml_version), 1)
        for d in node.devices:
            ids = (d.gpu, d.uuid)
            out.add(m.GPU_UP, ids, 1 if d.up else 0)
            if not d.up:
                continue
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
        gpu_of = {d.uuid: d.gpu for d in node.devices if d.up}
        for uuid, peer, level in node.topology:
            if uuid in gpu_of and peer in gpu_of:
                out.add(m.TOPOLOGY, (gpu_of[uuid], uuid, peer, level), 1)

    def _processes(self, snapshot: Snapshot, out: _Families) -> None:
        if snapshot.node is None:
            return
        for d in snapshot.node.devices:
            if not d.up:
                continue
            for p in d.processes:
                ids = (d.gpu, d.uuid, str(p.pid))
                out.add(m.PROCESS_INFO, ids + (p.command,), 1)
                if p.memory_used_bytes is not None:
                    out.add(m.PROCESS_MEMORY_USED, ids, p.memory_used_bytes)
                if p.utilization is not None:
                    out.add(m.PROCESS_UTILIZATION, ids, p.utilization)
                    counters = snapshot.process_counters.get((d.uuid, p.pid))
                    if counters is not None:
                        out.add(m.PROCESS_BUSY_SECONDS, ids, counters.busy)
                        out.add(m.PROCESS_IDLE_SECONDS, ids, counters.idle)
