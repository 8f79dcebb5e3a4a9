"""The `gpm` collector: SM, tensor and DRAM activity over each tick, from GPU Performance Monitoring
(Hopper and newer; MIG instances through their parent GPU).

GPM reports the activity between two samples: each tick takes one, computes the metrics against the
previous one and keeps the new one for the next tick.
"""

from __future__ import annotations

import ctypes
import struct
import time
from dataclasses import dataclass
from typing import Any

from gpulens.core import metrics as m
from gpulens.exporter.sources.base import DeviceSample
from gpulens.exporter.sources.nvml.calls import NvmlCalls
from gpulens.exporter.sources.nvml.device import Collector, Device

# NVML GPM metric ids (nvml.h nvmlGpmMetricId_t) and the specs they feed; GPM reports percent.
_METRICS = {
    1: m.GRAPHICS_ENGINE_ACTIVE,  # NVML_GPM_METRIC_GRAPHICS_UTIL
    2: m.SM_ACTIVE,  # NVML_GPM_METRIC_SM_UTIL
    3: m.SM_OCCUPANCY,  # NVML_GPM_METRIC_SM_OCCUPANCY
    5: m.TENSOR_ACTIVE,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    10: m.DRAM_ACTIVE,  # NVML_GPM_METRIC_DRAM_BW_UTIL
    11: m.FP64_ACTIVE,  # NVML_GPM_METRIC_FP64_UTIL
    12: m.FP32_ACTIVE,  # NVML_GPM_METRIC_FP32_UTIL
    13: m.FP16_ACTIVE,  # NVML_GPM_METRIC_FP16_UTIL
}
#: Of each nvmlGpmMetric_t answer (metricId, nvmlReturn, value, metricInfo's three pointers: 40 bytes), its
#: nvmlReturn and value, for the metrics asked, in _METRICS order.
_ANSWERS = struct.Struct("=" + "4xId24x" * len(_METRICS))
#: GPM needs two samples at least this far apart (NVML documentation: more than 100 ms).
MIN_SPACING_SECONDS = 0.1


@dataclass
class _Sampling:
    """One device's GPM state between ticks."""

    #: The last sample taken, kept for the next tick's metrics.
    previous: Any = None
    previous_at: float = 0.0  # time.monotonic() when it was taken
    #: The metrics request, its metric ids set once: each tick sets only the two samples.
    request: Any = None
    answers_at: int = 0  # the address of its metrics array


class Gpm(Collector):
    name = "gpm"
    help = "GPM's SM, tensor and DRAM activity (Hopper and newer)"

    def __init__(self, nvml: Any, calls: NvmlCalls):
        super().__init__(nvml, calls)
        #: The devices GPM supports, by UUID (a MIG instance as its parent GPU does).
        self._sampling: dict[str, _Sampling] = {}

    def discovered(self, devices: list[Device]) -> None:
        self.close()  # the samples of the enumeration before: a new one starts afresh
        supported = {d.uuid for d in devices if d.kept and d.uuid in self._sampling}
        for d in devices:
            if d.handle is None or d.kept:
                continue
            if d.mig_mode == "instance":
                if d.parent_uuid in supported:
                    supported.add(d.uuid)
                continue
            support = self.call(d, self.nvml.nvmlGpmQueryDeviceSupport, d.handle)
            if support is not None and support.isSupportedDevice:
                supported.add(d.uuid)
        self._sampling = {uuid: _Sampling() for uuid in supported}

    def read(self, d: Device, s: DeviceSample) -> None:
        state = self._sampling.get(d.uuid)
        if state is None:
            return
        nvml = self.nvml
        sample = self.call(d, nvml.nvmlGpmSampleAlloc)
        if sample is None:
            return
        if d.mig_mode == "instance":
            taken = self.call(d, nvml.nvmlGpmMigSampleGet, d.parent_handle, d.gpu_instance_id, sample)
        else:
            taken = self.call(d, nvml.nvmlGpmSampleGet, d.handle, sample)
        now = time.monotonic()
        if taken is None:
            self.calls.call(nvml.nvmlGpmSampleFree, sample)
            return
        previous, spacing = state.previous, now - state.previous_at
        if previous is not None and spacing >= MIN_SPACING_SECONDS:
            request = state.request
            if request is None:
                state.request = request = nvml.c_nvmlGpmMetricsGet_t()
                request.version = nvml.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = len(_METRICS)
                for i, metric_id in enumerate(_METRICS):
                    request.metrics[i].metricId = metric_id
                state.answers_at = ctypes.addressof(request) + type(request).metrics.offset
            request.sample1, request.sample2 = previous, sample
            if self.call(d, nvml.nvmlGpmMetricsGet, request) is not None:
                # The answers unpacked from the raw array: pynvml's structures convert every attribute read.
                answers = _ANSWERS.unpack(ctypes.string_at(state.answers_at, _ANSWERS.size))
                for spec, ret, percent in zip(_METRICS.values(), answers[::2], answers[1::2], strict=True):
                    if ret == nvml.NVML_SUCCESS:
                        s.values[spec] = {(): round(min(max(percent / 100, 0.0), 1.0), 6)}
        elif previous is not None:
            self.calls.call(nvml.nvmlGpmSampleFree, sample)  # too close to the previous one: keep the older sample
            return
        if previous is not None:
            self.calls.call(nvml.nvmlGpmSampleFree, previous)
        state.previous, state.previous_at = sample, now

    def close(self) -> None:
        for state in self._sampling.values():
            if state.previous is not None:
                self.calls.call(self.nvml.nvmlGpmSampleFree, state.previous)
                state.previous = None
