"""Renders the sampler's latest snapshot as fresh Prometheus metric families on every scrape.

No global Gauges: series of a process that ended, or of a GPU that fell off the bus, are simply not
rendered any more. Each section is guarded, because prometheus_client turns one exception in
collect() into an HTTP 500 for the whole scrape.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from gpulens.core import metrics as m
from gpulens.exporter.sampler import Sampler, Snapshot
from gpulens.core.pods import PodRef

log = logging.getLogger(__name__)


class _Families:
    """Rows gathered for one scrape, by metric spec, rendered in the order of the metric table."""

    def __init__(self):
        self._rows: dict[m.MetricSpec, list[tuple[tuple[str, ...], float]]] = {}

    def add(self, spec: m.MetricSpec, label_values: tuple[str, ...], value: float) -> None:
        self._rows.setdefault(spec, []).append((label_values, value))

    def metric_families(self) -> Iterator[Metric]:
        for spec in m.ALL:
            rows = self._rows.get(spec)
            if rows:
                cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
                family = cls(spec.family_name, spec.help, labels=spec.labels)
                for label_values, value in rows:
                    family.add_metric(label_values, value)
                yield family

    def text(self) -> str:
        """The Prometheus text format 0.0.4, byte for byte what prometheus_client's
        generate_latest() writes for metric_families() (a test holds it to that), at a fraction of
        the cost: label names are validated once by the metric table's tests, not per sample."""
        out = []
        for spec in m.ALL:
            rows = self._rows.get(spec)
            if not rows:
                continue
            out.append(_text_layout(spec)[0])
            for label_values, value in rows:
                prefix = _series_prefixes.get((spec, label_values))
                if prefix is None:
                    prefix = _series_prefix(spec, label_values)
                out.append(prefix + floatToGoString(value) + "\n")
        return "".join(out)


# Formatted `name{labels} ` per series. The same series come back scrape after scrape, so formatting
# them once is most of the render cost saved; the cache is dropped when it grows past any real node.
_series_prefixes: dict[tuple[m.MetricSpec, tuple[str, ...]], str] = {}
_SERIES_PREFIX_LIMIT = 100_000


def _series_prefix(spec: m.MetricSpec, label_values: tuple[str, ...]) -> str:
    _, names, order = _text_layout(spec)
    if names:
        labels = ",".join(f'{names[i]}="{_escape(label_values[j])}"' for i, j in enumerate(order))
        prefix = f"{spec.name}{{{labels}}} "
    else:
        prefix = f"{spec.name} "
    if len(_series_prefixes) >= _SERIES_PREFIX_LIMIT:
        _series_prefixes.clear()
    _series_prefixes[(spec, label_values)] = prefix
    return prefix


@functools.cache
def _text_layout(spec: m.MetricSpec) -> tuple[str, tuple[str, ...], tuple[int, ...]]:
    """HELP/TYPE lines and the label order (sorted by name, as prometheus_client writes them)."""
    help_text = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    kind = "counter" if spec.type == "counter" else "gauge"
    header = f"# HELP {spec.name} {help_text}\n# TYPE {spec.name} {kind}\n"
    order = tuple(sorted(range(len(spec.labels)), key=lambda i: spec.labels[i]))
    return header, tuple(spec.labels[i] for i in order), order


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return value


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
        yield from self._gather().metric_families()

    def render_text(self) -> bytes:
        """/metrics in the Prometheus text format, the fast path for what Prometheus asks for."""
        return self._gather().text().encode()

    def _gather(self) -> _Families:
        snapshot = self.sampler.snapshot
        out = _Families()
        for section in (self._self_metrics, self._devices, self._processes, self._pods):
            try:
                section(snapshot, out)
            except Exception:  # never let one section turn the scrape into a 500
                log.exception("rendering %s failed; the rest of the scrape is served", section.__name__)
        return out

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
        for (metric, source), count in sorted(fed_by.items()):
            out.add(m.METRIC_SOURCE, (metric, source), count)
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

    def _pods(self, snapshot: Snapshot, out: _Families) -> None:
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


_NO_POD = PodRef("", "", "")
