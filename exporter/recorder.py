"""`gpulens exporter --record FILE`: every sample appended to a trace CSV (docs/trace-format.md),
so `gpulens analyze FILE` can later say what happened on this node, with no Prometheus."""
from __future__ import annotations

import csv
import logging
import os
import time

from analyzer import trace as tr
from exporter import metric_specs as m
from exporter.sampler import Snapshot
from exporter.status import ProblemLog

log = logging.getLogger(__name__)

#: Trace column <- device metric.
_COLUMNS = {
    "gpu_util": m.UTILIZATION, "sm_active": m.SM_ACTIVE, "sm_occupancy": m.SM_OCCUPANCY,
    "tensor_active": m.TENSOR_ACTIVE, "dram_active": m.DRAM_ACTIVE, "gr_engine_active": m.GRAPHICS_ENGINE_ACTIVE,
    "fp16_active": m.FP16_ACTIVE, "fp32_active": m.FP32_ACTIVE, "fp64_active": m.FP64_ACTIVE,
    "memory_used_bytes": m.MEMORY_USED, "memory_total_bytes": m.MEMORY_TOTAL, "power_watts": m.POWER,
    "temperature_celsius": m.TEMPERATURE, "sm_clock_hertz": m.SM_CLOCK, "sm_clock_max_hertz": m.SM_CLOCK_MAX,
}
#: Trace rate column <- cumulative device counter.
_RATES = {"pcie_tx_bytes_per_second": m.PCIE_TRANSMIT, "pcie_rx_bytes_per_second": m.PCIE_RECEIVE,
          "nvlink_tx_bytes_per_second": m.NVLINK_TRANSMIT, "nvlink_rx_bytes_per_second": m.NVLINK_RECEIVE}


class Recorder:
    """Appends one row per device per sample. A write error is logged once and recording stops
    trying until the next sample; it never stops the exporter."""

    def __init__(self, path: str, node: str = ""):
        self.path = path
        self.node = node
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        self._file = open(path, "a", newline="", buffering=1)
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(tr.COLUMNS)
        self._previous: dict[tuple[str, str], tuple[float, float]] = {}
        self._problems = ProblemLog(log)

    def write(self, snapshot: Snapshot) -> None:
        node = snapshot.node
        if node is None:
            return
        now = time.time()
        pods = snapshot.attribution.pods_by_uuid if snapshot.attribution else None
        rows = []
        for d in node.devices:
            if not d.up:
                continue
            row = dict.fromkeys(tr.COLUMNS, "")
            row.update(timestamp=f"{now:.3f}", gpu=d.uuid, node=self.node, gpu_model=d.model)
            holders = (pods or {}).get(d.uuid) or [p.pod for p in d.processes if p.pod]
            if holders:
                row.update(namespace=holders[0].namespace, pod=holders[0].pod, container=holders[0].container)
            for column, spec in _COLUMNS.items():
                value = d.get(spec)
                row[column] = "" if value is None else repr(value)
            for column, spec in _RATES.items():
                value, key = d.get(spec), (d.uuid, spec.name)
                previous = self._previous.get(key)
                if value is not None:
                    self._previous[key] = (now, value)
                    if previous and now > previous[0] and value >= previous[1]:
                        row[column] = repr((value - previous[1]) / (now - previous[0]))
            if d.clock_event_reasons is not None:
                row["clock_event_reasons"] = str(d.clock_event_reasons)
            rows.append([row[c] for c in tr.COLUMNS])
        try:
            self._writer.writerows(rows)
            self._problems.resolved("write", f"recording to {self.path} works again")
        except OSError as e:
            self._problems.problem("write", f"cannot append to --record file {self.path}: {e.strerror}")

    def close(self) -> None:
        self._file.close()
