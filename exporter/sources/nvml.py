"""The NVML source: reads every GPU and MIG instance through nvidia-ml-py (pynvml).

Every NVML call goes through one choke point, `_DeviceReader.call`:
- NOT_SUPPORTED / FUNCTION_NOT_FOUND (older driver) mean "this GPU does not have it": the metric is
  omitted, never exported as 0 or NaN;
- GPU_IS_LOST means the GPU fell off the bus: the device is reported down and keeps only its up series;
- any other error drops that one value for this tick and is logged once, not every second.

XID errors arrive as NVML events. A watcher thread waits on an event set and counts every event per
GPU and XID code, so repeated errors are counted, not overwritten.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpulens.core import metrics as m
from gpulens.core.status import ProblemLog
from gpulens.core.topology import Pair
from gpulens.exporter.sources.base import DeviceSample, NodeSample, ProcessSample, Source, SourceUnavailable

log = logging.getLogger(__name__)

# NVML GPM metric ids (nvml.h nvmlGpmMetricId_t) and the specs they feed; GPM reports percent.
_GPM_METRICS = {
    1: m.GRAPHICS_ENGINE_ACTIVE,  # NVML_GPM_METRIC_GRAPHICS_UTIL
    2: m.SM_ACTIVE,  # NVML_GPM_METRIC_SM_UTIL
    3: m.SM_OCCUPANCY,  # NVML_GPM_METRIC_SM_OCCUPANCY
    5: m.TENSOR_ACTIVE,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    10: m.DRAM_ACTIVE,  # NVML_GPM_METRIC_DRAM_BW_UTIL
    11: m.FP64_ACTIVE,  # NVML_GPM_METRIC_FP64_UTIL
    12: m.FP32_ACTIVE,  # NVML_GPM_METRIC_FP32_UTIL
    13: m.FP16_ACTIVE,  # NVML_GPM_METRIC_FP16_UTIL
}
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
#: nvmlProcessUtilizationSample_t: pid, (padding), timeStamp, smUtil, memUtil, encUtil, decUtil.
_PROCESS_SAMPLE = struct.Struct("=I4xQIIII")
#: NVLink error counters over all links (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL), by gpulens' type label.
_NVLINK_ERROR_FIELDS = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
_NVLINK_GET_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE, one link per scopeId (Hopper and newer)
#: Link states that carry traffic: NVML_NVLINK_STATE_ACTIVE (= NVML_FEATURE_ENABLED of
#: nvmlDeviceGetNvLinkState) and NVML_NVLINK_STATE_SLEEP (low power between transfers).
_NVLINK_UP_STATES = (1, 2)
#: GPM needs two samples at least this far apart (NVML documentation: more than 100 ms).
_GPM_MIN_SPACING_SECONDS = 0.1


class DeviceLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST."""


@dataclass
class _Device:
    """A full GPU or MIG instance as discovered, with what never changes while it exists."""

    handle: object
    gpu: str
    uuid: str
    model: str
    pci_bus_id: str = ""
    mig_mode: str = "disabled"
    mig_profile: str = ""
    parent_uuid: str = ""
    parent_handle: object = None
    gpu_instance_id: int | None = None
    gpm_supported: bool = False
    gpm_previous: object = None  # the last GPM sample, kept for the next tick's delta
    gpm_previous_at: float = 0.0
    process_timestamp: int = 0  # nvmlDeviceGetProcessUtilization lastSeenTimeStamp (us)
    #: nvmlDeviceGetSamples lastSeenTimeStamp (us) per sampling type; absent until the first read.
    samples_seen: dict[int, int] = field(default_factory=dict)
    samples_unsupported: set[int] = field(default_factory=set)  # sampling types the driver refused
    utilization: float | None = None  # the newest utilization sample seen (ratio), for the gauge
    memory_utilization: float | None = None
    #: NVLinks of a full GPU (NVML_FI_DEV_NVLINK_LINK_COUNT at discovery; None where not reported).
    nvlink_links: int | None = None
    #: The field ids read every tick: PCIe and NVLink counters, and each link's state where the
    #: driver reports it as a field (cleared on the first refusal: nvmlDeviceGetNvLinkState then).
    board_fields: list = field(default_factory=list)
    links_down: tuple[int, ...] = ()
    static: dict = field(default_factory=dict)

    def carry_over(self, previous: _Device) -> None:
        """Keep what the driver's sample buffers were last read up to, across a rediscovery."""
        self.process_timestamp = previous.process_timestamp
        self.samples_seen = previous.samples_seen
        self.samples_unsupported = previous.samples_unsupported
        self.utilization, self.memory_utilization = previous.utilization, previous.memory_utilization
        self.links_down = previous.links_down  # logged when they changed, not again at each rediscovery


class NvmlSource(Source):
    name = "nvml"

    def __init__(self, event_wait_ms: int = 500, rediscover_seconds: float = 60.0):
        #: Devices are re-enumerated this often, to see MIG reconfiguration and GPUs coming back.
        self.rediscover_seconds = rediscover_seconds
        self._event_wait_ms = event_wait_ms
        self._devices: list[_Device] = []
        self._discovered_at = 0.0
        self._xids: Counter[tuple[str, str]] = Counter()
        self._xid_lock = threading.Lock()
        self._stop = threading.Event()
        self._problems = ProblemLog(log)
        self._process_names: dict[int, str] = {}
        self.driver_version = ""
        self.nvml_version = ""
        self._topology: list[Pair] = []

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
        self.driver_version = self._optional(pynvml.nvmlSystemGetDriverVersion) or ""
        self.nvml_version = self._optional(pynvml.nvmlSystemGetNVMLVersion) or ""
        self._discover()
        threading.Thread(target=self._watch_xids, name="gpulens-xid", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        for d in self._devices:
            self._free_gpm(d)
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down after a lost GPU may fail; nothing to do about it
            pass

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    # --- discovery -----------------------------------------------------------------------------
    def _discover(self) -> None:
        nvml = self.nvml
        known = {d.gpu: d for d in self._devices}
        for d in self._devices:
            self._free_gpm(d)
        devices: list[_Device] = []
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
            except nvml.NVMLError as e:
                # Keep the identity of a GPU we knew (it stays visible as up 0 under its own uuid);
                # one lost before we ever learnt its UUID is reported by index.
                previous = known.get(str(index))
                if previous is not None and previous.mig_mode != "instance":
                    devices.append(previous)
                    devices.extend(d for d in self._devices if d.parent_uuid == previous.uuid)
                else:
                    devices.append(_Device(handle=None, gpu=str(index), uuid=f"unknown-gpu-{index}", model=""))
                    self._problems.problem(f"discover{index}", f"GPU {index} cannot be opened: {e}")
                continue
            gpu = _Device(
                handle=handle, gpu=str(index), uuid=uuid, model=self._optional(nvml.nvmlDeviceGetName, handle) or ""
            )
            pci = self._optional(nvml.nvmlDeviceGetPciInfo, handle)
            gpu.pci_bus_id = pci.busId if pci is not None else ""
            if isinstance(gpu.pci_bus_id, bytes):
                gpu.pci_bus_id = gpu.pci_bus_id.decode()
            mig = self._optional(nvml.nvmlDeviceGetMigMode, handle)
            gpu.mig_mode = "enabled" if mig and mig[0] == nvml.NVML_DEVICE_MIG_ENABLE else "disabled"
            previous = known.get(gpu.gpu)
            if previous is not None and previous.uuid == uuid:
                gpu.carry_over(previous)
            gpu.gpm_supported = self._gpm_supported(handle)
            self._discover_links(gpu)
            devices.append(gpu)
            if gpu.mig_mode == "enabled":
                devices.extend(self._discover_mig(gpu))
        self._devices = devices
        self._discovered_at = time.monotonic()
        self._topology = self._read_topology([d for d in devices if d.handle is not None and d.mig_mode != "instance"])

    def _discover_mig(self, parent: _Device) -> list[_Device]:
        nvml = self.nvml
        found = []
        limit = self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, parent.handle) or 0
        for i in range(limit):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, i)
            except nvml.NVMLError:
                continue  # an empty slot: NVML_ERROR_NOT_FOUND
            gi = self._optional(nvml.nvmlDeviceGetGpuInstanceId, handle)
            name = self._optional(nvml.nvmlDeviceGetName, handle) or ""
            found.append(
                _Device(
                    handle=handle,
                    gpu=f"{parent.gpu}/gi{gi}",
                    uuid=self._optional(nvml.nvmlDeviceGetUUID, handle) or "",
                    model=parent.model,
                    pci_bus_id=parent.pci_bus_id,
                    mig_mode="instance",
                    # NVML names a MIG device "<GPU name> MIG 1g.5gb".
                    mig_profile=name.rpartition(" MIG ")[2] if " MIG " in name else "",
                    parent_uuid=parent.uuid,
                    parent_handle=parent.handle,
                    gpu_instance_id=gi,
                    gpm_supported=parent.gpm_supported,
                )
            )
        return found

    def _discover_links(self, gpu: _Device) -> None:
        """How many NVLinks the GPU has, and the fields to read each tick."""
        nvml = self.nvml
        count = self._optional(nvml.nvmlDeviceGetFieldValues, gpu.handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        if count is not None and count[0].nvmlReturn == nvml.NVML_SUCCESS:
            gpu.nvlink_links = count[0].value.uiVal
        gpu.board_fields = [
            nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        ]
        if gpu.nvlink_links:
            gpu.board_fields += [
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                *_NVLINK_ERROR_FIELDS.values(),
                *((_NVLINK_GET_STATE, link) for link in range(gpu.nvlink_links)),
            ]

    def _gpm_supported(self, handle: Any) -> bool:
        try:
            return bool(self.nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except (self.nvml.NVMLError, AttributeError):
            return False

    def _read_topology(self, gpus: list[_Device]) -> list[Pair]:
        pairs = []
        for a in gpus:
            for b in gpus:
                if a is b:
                    continue
                level = self._optional(self.nvml.nvmlDeviceGetTopologyCommonAncestor, a.handle, b.handle)
                if level is not None and level in m.TOPOLOGY_LEVELS:
                    pairs.append((a.uuid, b.uuid, m.TOPOLOGY_LEVELS[level], self._p2p(a, b)))
        return pairs

    def _p2p(self, a: _Device, b: _Device) -> str:
        """How peer-to-peer reads from a to b travel: NVLink where the driver offers P2P over it, else
        PCIe where it offers P2P reads at all, else none (copies bounce through host memory)."""
        nvml = self.nvml
        # pynvml spells NVML_P2P_CAPS_INDEX_READ (0) with a trailing comma, as a tuple: the values are nvml.h's.
        nvlink = self._optional(nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, 2)  # NVML_P2P_CAPS_INDEX_NVLINK
        read = self._optional(nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, 0)  # NVML_P2P_CAPS_INDEX_READ
        if nvlink is None and read is None:
            return "unknown"
        if nvlink == nvml.NVML_P2P_STATUS_OK:
            return "nvlink"
        return "pcie" if read == nvml.NVML_P2P_STATUS_OK else "none"

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
        return NodeSample(devices, self.driver_version, self.nvml_version, self._topology)

    def call(self, d: _Device, fn: Callable[..., Any], *args: Any) -> Any:
        """The NVML choke point: value, or None where unsupported or failing this tick."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            code = e.value
            if code in (self.nvml.NVML_ERROR_NOT_SUPPORTED, self.nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return None
            if code == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise DeviceLost() from e
            self._problems.problem(f"{d.uuid}:{fn.__name__}", f"GPU {d.gpu}: {fn.__name__} failed: {e}")
            return None

    def _read(self, d: _Device, s: DeviceSample) -> None:
        nvml, h, call = self.nvml, d.handle, self.call
        instance = d.mig_mode == "instance"
        if d.mig_mode == "disabled" and nvml.NVML_GPU_UTILIZATION_SAMPLES not in d.samples_unsupported:
            self._read_utilization_samples(d, s)
        if not instance and s.activity_samples is None:
            util = call(d, nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None and d.mig_mode != "enabled":
                s.set(m.UTILIZATION, util.gpu / 100)
                s.set(m.MEMORY_CONTROLLER_UTILIZATION, util.memory / 100)
        memory = call(d, nvml.nvmlDeviceGetMemoryInfo, h, nvml.nvmlMemory_v2)
        if memory is not None:
            s.set(m.MEMORY_USED, memory.used)
            s.set(m.MEMORY_TOTAL, memory.total)
            s.set(m.MEMORY_RESERVED, memory.reserved)
        self._read_gpm(d, s)
        if not instance:
            self._read_board(d, s)
        self._read_processes(d, s)

    def _read_utilization_samples(self, d: _Device, s: DeviceSample) -> None:
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

    def _samples(self, d: _Device, kind: int) -> list[tuple[float, float]] | None:
        """nvmlDeviceGetSamples: the samples newer than the last read, as (unix seconds, ratio), oldest
        first; [] when there is nothing new (NVML_ERROR_NOT_FOUND) or on the first read (what the driver
        kept before the exporter started is not ours to count); None when the driver cannot."""
        nvml = self.nvml
        seen = d.samples_seen.get(kind)
        try:
            value_type, samples = nvml.nvmlDeviceGetSamples(d.handle, kind, seen or 0)
        except nvml.NVMLError as e:
            if e.value == nvml.NVML_ERROR_NOT_FOUND:
                d.samples_seen.setdefault(kind, 0)  # an empty buffer: whatever comes next is new
                return []
            if e.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise DeviceLost() from e
            if e.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                d.samples_unsupported.add(kind)
            else:
                self._problems.problem(f"{d.uuid}:samples", f"GPU {d.gpu}: nvmlDeviceGetSamples failed: {e}")
            return None
        # nvmlSample_t is {unsigned long long timeStamp; nvmlValue_t sampleValue}: unpacked from the raw
        # bytes, because pynvml's structures convert every attribute read in Python.
        layout = _SAMPLE_LAYOUTS.get(value_type, _SAMPLE_LAYOUTS[1])
        unpacked = sorted(layout.iter_unpack(b"".join(map(bytes, samples))))
        d.samples_seen[kind] = max(unpacked[-1][0] if unpacked else 0, seen or 0)
        if seen is None:
            return []
        return [(timestamp / 1e6, value / 100) for timestamp, value in unpacked if timestamp > seen]

    def _read_board(self, d: _Device, s: DeviceSample) -> None:
        """What only a physical GPU has: links, clocks, power, temperature, errors."""
        nvml, h, call = self.nvml, d.handle, self.call
        fields = call(d, nvml.nvmlDeviceGetFieldValues, h, d.board_fields)
        if fields is not None:
            self._read_links(d, s, fields)
        s.set(m.PCIE_LINK_GENERATION, call(d, nvml.nvmlDeviceGetCurrPcieLinkGeneration, h))
        s.set(m.PCIE_LINK_MAX_GENERATION, call(d, nvml.nvmlDeviceGetMaxPcieLinkGeneration, h))
        s.set(m.PCIE_LINK_WIDTH, call(d, nvml.nvmlDeviceGetCurrPcieLinkWidth, h))
        s.set(m.PCIE_LINK_MAX_WIDTH, call(d, nvml.nvmlDeviceGetMaxPcieLinkWidth, h))
        s.set(m.SM_CLOCK, _scaled(call(d, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM), 1e6))
        s.set(m.SM_CLOCK_MAX, _scaled(call(d, nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM), 1e6))
        s.set(m.MEMORY_CLOCK, _scaled(call(d, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM), 1e6))
        s.set(m.POWER, _scaled(call(d, nvml.nvmlDeviceGetPowerUsage, h), 1e-3))
        s.set(m.POWER_LIMIT, _scaled(call(d, nvml.nvmlDeviceGetEnforcedPowerLimit, h), 1e-3))
        s.set(m.ENERGY, _scaled(call(d, nvml.nvmlDeviceGetTotalEnergyConsumption, h), 1e-3))
        s.set(m.TEMPERATURE, call(d, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU))
        s.clock_event_reasons = call(d, nvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        for kind, error_type in (
            ("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            s.set(m.ECC_ERRORS, call(d, nvml.nvmlDeviceGetTotalEccErrors, h, error_type, nvml.NVML_AGGREGATE_ECC), kind)
        rows = call(d, nvml.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            correctable, uncorrectable, pending, failed = rows
            s.set(m.REMAPPED_ROWS, correctable, "correctable")
            s.set(m.REMAPPED_ROWS, uncorrectable, "uncorrectable")
            s.set(m.ROW_REMAP_PENDING, 1 if pending else 0)
            s.set(m.ROW_REMAP_FAILED, 1 if failed else 0)
        with self._xid_lock:
            for (uuid, xid), count in self._xids.items():
                if uuid == d.uuid:
                    s.set(m.XID_ERRORS, count, xid)

    def _read_links(self, d: _Device, s: DeviceSample, fields: Any) -> None:
        """PCIe and NVLink traffic, NVLink errors and the state of every link, from one field-values read
        (unpacked from the raw array: pynvml's structures convert every attribute read in Python)."""
        ok = self.nvml.NVML_SUCCESS
        values = list(_FIELD_VALUE.iter_unpack(bytes(fields)))  # (nvmlReturn, value)
        for (ret, value), spec in zip(values, (m.PCIE_TRANSMIT, m.PCIE_RECEIVE), strict=False):
            if ret == ok:
                s.set(spec, value)
        s.set(m.NVLINK_LINKS, d.nvlink_links)
        if not d.nvlink_links:
            return
        for (ret, value), spec in zip(values[2:4], (m.NVLINK_TRANSMIT, m.NVLINK_RECEIVE), strict=True):
            if ret == ok:
                s.set(spec, value * 1024)  # KiB
        for (ret, value), kind in zip(values[4:8], _NVLINK_ERROR_FIELDS, strict=True):
            if ret == ok:
                s.set(m.NVLINK_ERRORS, value, kind)
        states = values[8:]
        if states and all(ret == ok for ret, _ in states):
            up = [value & 0xFFFFFFFF in _NVLINK_UP_STATES for _, value in states]
        else:
            if states:  # before Hopper the state is no field: one call per link from now on
                d.board_fields = d.board_fields[:8]
            up = []
            for link in range(d.nvlink_links):
                state = self.call(d, self.nvml.nvmlDeviceGetNvLinkState, d.handle, link)
                if state is None:
                    return
                up.append(state in _NVLINK_UP_STATES)
        down = tuple(link for link, is_up in enumerate(up) if not is_up)
        s.set(m.NVLINK_LINKS_DOWN, len(down))
        if down != d.links_down:  # logged on each change only: the gauge counts, the log names the links
            d.links_down = down
            if down:
                log.warning("GPU %s (%s): NVLink links down: %s of %s", d.gpu, d.uuid, list(down), d.nvlink_links)
            else:
                log.warning("GPU %s (%s): every NVLink link is up again", d.gpu, d.uuid)

    def _read_gpm(self, d: _Device, s: DeviceSample) -> None:
        """SM/tensor/DRAM activity over the interval since the previous tick, via GPM (Hopper+)."""
        if not d.gpm_supported:
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
            nvml.nvmlGpmSampleFree(sample)
            return
        previous, spacing = d.gpm_previous, now - d.gpm_previous_at
        if previous is not None and spacing >= _GPM_MIN_SPACING_SECONDS:
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(_GPM_METRICS)
            request.sample1, request.sample2 = previous, sample
            for i, metric_id in enumerate(_GPM_METRICS):
                request.metrics[i].metricId = metric_id
            if self.call(d, nvml.nvmlGpmMetricsGet, request) is not None:
                for i, spec in enumerate(_GPM_METRICS.values()):
                    if request.metrics[i].nvmlReturn == nvml.NVML_SUCCESS:
                        s.set(spec, round(min(max(request.metrics[i].value / 100, 0.0), 1.0), 6))
        elif previous is not None:
            nvml.nvmlGpmSampleFree(sample)  # too close to the previous one: keep the older sample
            return
        if previous is not None:
            nvml.nvmlGpmSampleFree(previous)
        d.gpm_previous, d.gpm_previous_at = sample, now

    def _free_gpm(self, d: _Device) -> None:
        if d.gpm_previous is not None:
            self._optional(self.nvml.nvmlGpmSampleFree, d.gpm_previous)
            d.gpm_previous = None

    def _read_processes(self, d: _Device, s: DeviceSample) -> None:
        nvml, h = self.nvml, d.handle
        if d.mig_mode == "enabled":
            return  # processes are reported on the MIG instances they run in
        processes = self.call(d, nvml.nvmlDeviceGetComputeRunningProcesses, h)
        if processes is None:
            return
        # Per PID, the driver's samples since the last read: (CPU time in us, SM share in percent). The
        # first read returns whatever the driver kept before the exporter started: averaged into the
        # gauge, but not samples of ours.
        by_pid: dict[int, list[tuple[int, int]]] | None = None
        seen = d.process_timestamp
        if processes and d.mig_mode != "instance":  # NVML has no per-process utilization on MIG
            by_pid = {}
            try:
                raw = b"".join(map(bytes, nvml.nvmlDeviceGetProcessUtilization(h, seen)))
                for pid, timestamp, sm, *_ in _PROCESS_SAMPLE.iter_unpack(raw):
                    by_pid.setdefault(pid, []).append((timestamp, sm))
                    d.process_timestamp = max(d.process_timestamp, timestamp)
            except nvml.NVMLError as e:
                if e.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise DeviceLost() from e
                if e.value != nvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: no samples since last time = no activity
                    by_pid = None
        for p in processes:
            pid = p.pid
            name = self._process_names.get(pid)
            if name is None:
                name = self._optional(nvml.nvmlSystemGetProcessName, pid) or ""
                self._process_names[pid] = name = name.rsplit("/", 1)[-1]
            utilization = samples = None
            if by_pid is not None:
                pid_samples = by_pid.get(pid, ())
                utilization = sum(v for _, v in pid_samples) / len(pid_samples) / 100 if pid_samples else 0.0
                if seen:
                    samples = [(t / 1e6, v / 100) for t, v in pid_samples if t > seen]
            s.processes.append(ProcessSample(pid, name, p.usedGpuMemory, utilization, samples=samples))
        if len(self._process_names) > 4096:  # PIDs are reused; forget names now and then
            self._process_names.clear()

    # --- XID events ----------------------------------------------------------------------------
    def _watch_xids(self) -> None:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as e:
            self._problems.problem("xid", f"XID events unavailable: {e}")
            return
        handles = {}
        for d in self._devices:
            if d.handle is not None and d.mig_mode != "instance":
                try:
                    nvml.nvmlDeviceRegisterEvents(d.handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                    handles[_handle_key(d.handle)] = d.uuid
                except nvml.NVMLError as e:
                    self._problems.problem(f"xid{d.uuid}", f"GPU {d.gpu}: XID events unavailable: {e}")
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait(event_set, self._event_wait_ms)
            except nvml.NVMLError as e:
                if e.value != nvml.NVML_ERROR_TIMEOUT:
                    self._problems.problem("xidwait", f"waiting for XID events failed: {e}")
                    self._stop.wait(1.0)
                continue
            uuid = handles.get(_handle_key(event.device))
            if uuid is not None and event.eventType == nvml.nvmlEventTypeXidCriticalError:
                with self._xid_lock:
                    self._xids[(uuid, str(event.eventData))] += 1
        self._optional(nvml.nvmlEventSetFree, event_set)


def _handle_key(handle: Any) -> int:
    """nvmlDevice_t handles are pointers; compare them by address."""
    import ctypes

    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
