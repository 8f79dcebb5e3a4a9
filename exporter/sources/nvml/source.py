"""The NVML source's discovery and basic reads: every GPU and MIG instance through nvidia-ml-py (pynvml).

Every NVML failure is judged in one place, the choke point of calls.py: NOT_SUPPORTED or
FUNCTION_NOT_FOUND (an older driver) mean "this GPU does not have it" and the metric is omitted (a plain
board read is not retried until rediscovery); GPU_IS_LOST reports the device down, with only its up
series; any other error drops that one value for this tick and is logged once, not every second. Calls
that drivers have in several versions are made in the newest the driver has (calls.Versioned).

The read groups beyond the basics are collectors, as node_exporter has them (`--collector.NAME`,
collectors.py): each can be switched off, and each reports its success and duration.

The array answers (field values, utilization samples) are read with one driver call each into buffers
each GPU keeps (buffers.py) and unpacked from the raw bytes.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gpulens.core import metrics as m
from gpulens.core.status import CollectorStatus, ProblemLog
from gpulens.exporter.sources.base import DeviceSample, NodeSample, Source, SourceUnavailable
from gpulens.exporter.sources.nvml.buffers import DeviceBuffers
from gpulens.exporter.sources.nvml.calls import DeviceLost, NvmlCalls, Outcome, Version, Versioned
from gpulens.exporter.sources.nvml.collectors import COLLECTORS
from gpulens.exporter.sources.nvml.device import BoardRead, Collector, Device

log = logging.getLogger(__name__)

#: The layout of an nvmlSample_t (timestamp, then the nvmlValue_t union of 8 bytes), by the nvmlValueType_t
#: the driver says its values have (utilization: 1, unsigned int).
_SAMPLE_LAYOUTS = {
    kind: struct.Struct("=Q" + member)
    for kind, member in {0: "d", 1: "I4x", 2: "Q", 3: "Q", 4: "q", 5: "i4x", 6: "H6x"}.items()
}
#: Of an nvmlFieldValue_t (fieldId, scopeId, timestamp, latencyUsec, valueType: 28 bytes), its nvmlReturn and
#: the 8-byte nvmlValue_t union, read as unsigned long long (an unsigned int value is its low half: NVIDIA hosts
#: are little-endian).
_FIELD_VALUE = struct.Struct("=28xIQ")


class NvmlSource(Source):
    name = "nvml"

    def __init__(
        self,
        rediscover_seconds: float = 60.0,
        collectors: frozenset[str] = frozenset(COLLECTORS),
    ):
        #: Devices are re-enumerated this often, to see MIG reconfiguration and GPUs coming back.
        self.rediscover_seconds = rediscover_seconds
        #: The names of the enabled collectors (COLLECTORS).
        self.enabled = collectors
        #: The enabled collectors, in COLLECTORS' order, once started.
        self.collectors: list[Collector] = []
        self._devices: list[Device] = []
        self._discovered_at = 0.0
        self._problems = ProblemLog(log)
        self.driver_version = ""
        self.nvml_version = ""
        #: Every full GPU enumerated since the start, by UUID: one that leaves the enumeration stays expected.
        self._expected: dict[str, Device] = {}

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise SourceUnavailable("the nvidia-ml-py package is not installed: pip install nvidia-ml-py") from e
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            raise SourceUnavailable(
                "the NVIDIA driver library libnvidia-ml.so.1 was not found: install the NVIDIA driver "
                "(or run in a container with the NVIDIA runtime), or use --source=simulated to try "
                "gpulens without a GPU"
            ) from e
        except pynvml.NVMLError_DriverNotLoaded as e:
            raise SourceUnavailable(
                "the NVIDIA kernel driver is not loaded (nvidia-smi will say the same): "
                "load it, or use --source=simulated"
            ) from e
        except pynvml.NVMLError as e:
            raise SourceUnavailable(
                f"NVML failed to initialise: {e}; check that nvidia-smi works on this node, or use --source=simulated"
            ) from e
        names = [name for name in COLLECTORS if name in self.enabled]
        self.calls = NvmlCalls(pynvml, self._problems, names)
        self.collectors = [COLLECTORS[name](pynvml, self.calls) for name in names]
        self._memory = Versioned(
            pynvml,
            [
                Version(
                    "nvmlDeviceGetMemoryInfo_v2", partial(pynvml.nvmlDeviceGetMemoryInfo, version=pynvml.nvmlMemory_v2)
                ),
                # The first version has no `reserved`: its `used` includes what the driver reserves.
                Version("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo),
            ],
        )
        self._clock_reasons = Versioned(
            pynvml,
            [
                Version("nvmlDeviceGetCurrentClocksEventReasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons),
                Version("nvmlDeviceGetCurrentClocksThrottleReasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons),
            ],
        )
        self.driver_version = self._optional(pynvml.nvmlSystemGetDriverVersion) or ""
        self.nvml_version = self._optional(pynvml.nvmlSystemGetNVMLVersion) or ""
        self._discover()

    def close(self) -> None:
        for collector in self.collectors:
            collector.close()
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down after a lost GPU may fail; nothing to do about it
            pass

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A call made outside any GPU's tick (discovery, the system's names): None where it fails."""
        return self.calls.call(fn, *args)

    def statuses(self) -> dict[str, CollectorStatus]:
        return dict(self.calls.statuses)

    # --- discovery -----------------------------------------------------------------------------
    def _discover(self) -> None:
        nvml = self.nvml
        known = {d.gpu: d for d in self._devices}
        devices: list[Device] = []
        count = self._optional(nvml.nvmlDeviceGetCount)
        if count is None:
            raise RuntimeError("nvmlDeviceGetCount failed (the log line above says why)")
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
            except nvml.NVMLError as e:
                # Keep the identity of a GPU we knew (it stays visible as up 0 under its own uuid);
                # one lost before we ever learnt its UUID is reported by index.
                previous = known.get(str(index))
                if previous is not None and previous.mig_mode != "instance":
                    kept = [previous, *(d for d in self._devices if d.parent_uuid == previous.uuid)]
                    for d in kept:
                        d.kept = True
                    devices.extend(kept)
                else:
                    unknown = Device(None, str(index), f"unknown-gpu-{index}", "", DeviceBuffers(nvml, None))
                    devices.append(unknown)
                    self._problems.problem(f"discover{index}", f"GPU {index} cannot be opened: {e}")
                continue
            name = self._optional(nvml.nvmlDeviceGetName, handle) or ""
            gpu = Device(handle, str(index), uuid, name, DeviceBuffers(nvml, handle))
            pci = self._optional(nvml.nvmlDeviceGetPciInfo, handle)
            gpu.pci_bus_id = pci.busId if pci is not None else ""
            if isinstance(gpu.pci_bus_id, bytes):
                gpu.pci_bus_id = gpu.pci_bus_id.decode()
            mig = self._optional(nvml.nvmlDeviceGetMigMode, handle)
            gpu.mig_mode = "enabled" if mig and mig[0] == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"
            previous = known.get(gpu.gpu)
            if previous is not None and previous.uuid == uuid:
                gpu.carry_over(previous)
            gpu.counter_fields = [(m.PCIE_TRANSMIT, 1.0, ()), (m.PCIE_RECEIVE, 1.0, ())]
            gpu.board_fields = [nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
            gpu.board_reads = self._board_reads()
            self._read_limits(gpu)
            devices.append(gpu)
            if gpu.mig_mode == "enabled":
                devices.extend(self._discover_mig(gpu))
        self._keep_missing(devices)
        self._devices = devices
        self._discovered_at = time.monotonic()
        for collector in self.collectors:
            with self.calls.collector(collector.name):
                collector.discovered(devices)

    def _keep_missing(self, devices: list[Device]) -> None:
        """GPUs enumerated before but not now (fallen off the bus, unbound) stay in `devices`, without a
        handle, so they are reported down under their own UUID; their departure and return are logged."""
        enumerated = {d.uuid for d in devices}
        for d in devices:
            if d.handle is not None and d.mig_mode != "instance":
                self._expected[d.uuid] = d
                self._problems.resolved(
                    f"gone{d.uuid}", f"GPU {d.uuid} ({d.pci_bus_id}) is enumerated again, as GPU {d.gpu}"
                )
        for uuid, gone in self._expected.items():
            if uuid in enumerated:
                continue
            self._problems.problem(
                f"gone{uuid}",
                f"GPU {gone.gpu} ({uuid}, PCI {gone.pci_bus_id}) is no longer enumerated by the driver: it fell off "
                "the bus or was unbound (dmesg: XID 79?); it stays expected, reported as gpulens_gpu_up 0",
            )
            devices.append(
                Device(None, gone.gpu, uuid, gone.model, DeviceBuffers(self.nvml, None), pci_bus_id=gone.pci_bus_id)
            )

    def _discover_mig(self, parent: Device) -> list[Device]:
        nvml = self.nvml
        found = []
        limit = self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, parent.handle) or 0
        for i in range(limit):
            handle = self._optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, parent.handle, i)
            if handle is None:
                continue  # an empty slot: NVML_ERROR_NOT_FOUND
            gi = self._optional(nvml.nvmlDeviceGetGpuInstanceId, handle)
            name = self._optional(nvml.nvmlDeviceGetName, handle) or ""
            found.append(
                Device(
                    handle=handle,
                    gpu=f"{parent.gpu}/gi{gi}",
                    uuid=self._optional(nvml.nvmlDeviceGetUUID, handle) or "",
                    model=parent.model,
                    buffers=DeviceBuffers(nvml, handle),
                    pci_bus_id=parent.pci_bus_id,
                    mig_mode="instance",
                    # NVML names a MIG device "<GPU name> MIG 1g.5gb".
                    mig_profile=name.rpartition(" MIG ")[2] if " MIG " in name else "",
                    parent_uuid=parent.uuid,
                    parent_handle=parent.handle,
                    gpu_instance_id=gi,
                )
            )
        return found

    # --- sampling ------------------------------------------------------------------------------
    def sample(self) -> NodeSample:
        if time.monotonic() - self._discovered_at > self.rediscover_seconds:
            self._discover()
        devices = []
        for d in self._devices:
            sample = DeviceSample(
                gpu=d.gpu,
                uuid=d.uuid,
                model=d.model,
                pci_bus_id=d.pci_bus_id,
                mig_mode=d.mig_mode,
                mig_profile=d.mig_profile,
                parent_uuid=d.parent_uuid,
            )
            if d.handle is None:
                sample.up = False
            else:
                try:
                    self._read(d, sample)
                    self._problems.resolved(f"lost{d.uuid}", f"GPU {d.gpu} ({d.uuid}) answers again")
                except DeviceLost:
                    sample = DeviceSample(gpu=d.gpu, uuid=d.uuid, up=False)
                    self._problems.problem(
                        f"lost{d.uuid}",
                        f"GPU {d.gpu} ({d.uuid}) is lost (NVML_ERROR_GPU_IS_LOST): "
                        "it fell off the bus or needs a reset; its series are withdrawn",
                    )
            devices.append(sample)
        node = NodeSample(devices, self.driver_version, self.nvml_version)
        for collector in self.collectors:
            collector.finish(node)
        self.calls.end_tick()
        return node

    def call(self, d: Device, fn: Callable[..., Any], *args: Any) -> Any:
        """A read of GPU `d` through the choke point: its value, or None where unsupported or failing
        this tick; DeviceLost raised where the GPU fell off the bus."""
        return self.calls.call(fn, *args, device=d.gpu)

    def _read(self, d: Device, s: DeviceSample) -> None:
        nvml, h, call = self.nvml, d.handle, self.call
        instance = d.mig_mode == "instance"
        if d.mig_mode == "disabled" and nvml.NVML_GPU_UTILIZATION_SAMPLES not in d.samples_unsupported:
            self._read_utilization_samples(d, s)
        if not instance and s.activity_samples is None:
            util = call(d, nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None and d.mig_mode != "enabled":
                s.set(m.UTILIZATION, util.gpu / 100)
                s.set(m.MEMORY_CONTROLLER_UTILIZATION, util.memory / 100)
        memory = call(d, self._memory, h)
        if memory is not None:
            s.set(m.MEMORY_USED, memory.used)
            s.set(m.MEMORY_TOTAL, memory.total)
            s.set(m.MEMORY_RESERVED, getattr(memory, "reserved", None))  # not in the first version
        if not instance:
            self._read_board(d, s)
        for collector in self.collectors:
            with self.calls.collector(collector.name):
                collector.read(d, s)

    def _read_utilization_samples(self, d: Device, s: DeviceSample) -> None:
        """Every utilization sample the driver kept since the last read (it samples every 1/6 s to 1 s,
        by product): exact busy time, and the shape of the activity, at the driver's own rate. The
        gauges show the newest sample. Where the driver keeps none, activity_samples stays None and the
        caller reads nvmlDeviceGetUtilizationRates once per tick instead."""
        nvml = self.nvml
        gpu = self._samples(d, nvml.NVML_GPU_UTILIZATION_SAMPLES)
        if gpu is None:
            return
        s.activity_samples = gpu
        if gpu:
            d.utilization = gpu[-1][1]
        memory = None
        if nvml.NVML_MEMORY_UTILIZATION_SAMPLES not in d.samples_unsupported:
            memory = self._samples(d, nvml.NVML_MEMORY_UTILIZATION_SAMPLES)
        if memory:
            d.memory_utilization = memory[-1][1]
        elif memory is None:
            rates = self.call(d, nvml.nvmlDeviceGetUtilizationRates, d.handle)
            d.memory_utilization = None if rates is None else rates.memory / 100
        s.set(m.UTILIZATION, d.utilization)
        s.set(m.MEMORY_CONTROLLER_UTILIZATION, d.memory_utilization)

    def _samples(self, d: Device, kind: int) -> list[tuple[float, float]] | None:
        """nvmlDeviceGetSamples: the samples newer than the last read, as (unix seconds, ratio), oldest
        first; [] when there is nothing new (NVML_ERROR_NOT_FOUND) or on the first read (what the driver
        kept before the exporter started is not ours to count); None when the driver cannot."""
        nvml = self.nvml
        seen = d.samples_seen.get(kind)
        try:
            value_type, raw = d.buffers.samples(kind, seen or 0)
        except nvml.NVMLError as e:
            outcome = self.calls.sort(e, "nvmlDeviceGetSamples", d.gpu)
            if outcome is Outcome.NOTHING:
                d.samples_seen.setdefault(kind, 0)  # an empty buffer: whatever comes next is new
                return []
            if outcome is Outcome.UNSUPPORTED:
                d.samples_unsupported.add(kind)
            return None
        layout = _SAMPLE_LAYOUTS.get(value_type, _SAMPLE_LAYOUTS[1])
        unpacked = sorted(layout.iter_unpack(raw))
        d.samples_seen[kind] = max(unpacked[-1][0] if unpacked else 0, seen or 0)
        if seen is None:
            return []
        return [(timestamp / 1e6, value / 100) for timestamp, value in unpacked if timestamp > seen]

    def _board_reads(self) -> list[BoardRead]:
        """The board's plain gauges and counters, one NVML call each (device handle first)."""
        nvml = self.nvml
        ecc = nvml.nvmlDeviceGetTotalEccErrors
        return [
            (m.PCIE_LINK_GENERATION, nvml.nvmlDeviceGetCurrPcieLinkGeneration, (), 1.0, ()),
            (m.PCIE_LINK_WIDTH, nvml.nvmlDeviceGetCurrPcieLinkWidth, (), 1.0, ()),
            (m.SM_CLOCK, nvml.nvmlDeviceGetClockInfo, (nvml.NVML_CLOCK_SM,), 1e6, ()),  # MHz
            (m.MEMORY_CLOCK, nvml.nvmlDeviceGetClockInfo, (nvml.NVML_CLOCK_MEM,), 1e6, ()),
            (m.POWER, nvml.nvmlDeviceGetPowerUsage, (), 1e-3, ()),  # mW
            (m.POWER_LIMIT, nvml.nvmlDeviceGetEnforcedPowerLimit, (), 1e-3, ()),
            (m.ENERGY, nvml.nvmlDeviceGetTotalEnergyConsumption, (), 1e-3, ()),  # mJ
            (m.TEMPERATURE, nvml.nvmlDeviceGetTemperature, (nvml.NVML_TEMPERATURE_GPU,), 1.0, ()),
            (m.ECC_ERRORS, ecc, (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC), 1.0, ("corrected",)),
            (
                m.ECC_ERRORS,
                ecc,
                (nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
                1.0,
                ("uncorrected",),
            ),
        ]

    def _read_limits(self, gpu: Device) -> None:
        """What the board can do at most, read at discovery: it does not change while the GPU is there."""
        nvml, h = self.nvml, gpu.handle
        for spec, value in (
            (m.PCIE_LINK_MAX_GENERATION, self._optional(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h)),
            (m.PCIE_LINK_MAX_WIDTH, self._optional(nvml.nvmlDeviceGetMaxPcieLinkWidth, h)),
            (m.SM_CLOCK_MAX, _scaled(self._optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM), 1e6)),
        ):
            if value is not None:
                gpu.limits[spec] = float(value)

    def _read_board(self, d: Device, s: DeviceSample) -> None:
        """What only a physical GPU has: links, clocks, power, temperature, errors."""
        nvml, h, call = self.nvml, d.handle, self.call
        fields = call(d, d.buffers.field_values, d.board_fields)
        d.field_answers = None if fields is None else self._read_counters(d, s, fields)
        # The plain reads without the choke point's frame per call (this runs for every GPU every second);
        # failures take the same path, and a read the GPU refuses is not tried again until rediscovery.
        values, refused = s.values, []
        for spec, value in d.limits.items():
            values[spec] = {(): value}
        for read in d.board_reads:
            spec, fn, args, factor, labels = read
            try:
                value = fn(h, *args)
            except nvml.NVMLError as e:
                if self.calls.sort(e, fn.__name__, d.gpu) is Outcome.UNSUPPORTED:
                    refused.append(read)
                continue
            values.setdefault(spec, {})[labels] = value * factor
        for read in refused:
            d.board_reads.remove(read)
        s.clock_event_reasons = call(d, self._clock_reasons, h)
        rows = call(d, nvml.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            correctable, uncorrectable, pending, failed = rows
            s.set(m.REMAPPED_ROWS, correctable, "correctable")
            s.set(m.REMAPPED_ROWS, uncorrectable, "uncorrectable")
            s.set(m.ROW_REMAP_PENDING, 1 if pending else 0)
            s.set(m.ROW_REMAP_FAILED, 1 if failed else 0)

    def _read_counters(self, d: Device, s: DeviceSample, fields: bytes) -> list[tuple[int, int]]:
        """The counters of one field-values read (PCIe's, and NVLink's where its collector added them),
        unpacked from the raw array (pynvml's structures convert every attribute read in Python); returns
        the (nvmlReturn, value) answers past the counters, for the collectors that asked for them."""
        ok, out = self.nvml.NVML_SUCCESS, s.values
        values = list(_FIELD_VALUE.iter_unpack(fields))  # (nvmlReturn, value): the counters, then the rest
        counters = d.counter_fields
        for (ret, value), (spec, factor, labels) in zip(values, counters, strict=False):
            if ret == ok:
                out.setdefault(spec, {})[labels] = value * factor
        return values[len(counters) :]

    def loop_errors(self) -> int:
        return sum(collector.loop_errors() for collector in self.collectors)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
