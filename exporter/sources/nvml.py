"""The NVML source: reads every GPU and MIG instance through nvidia-ml-py (pynvml).

Every NVML failure is judged in one place, the choke point of nvml_calls.py: NOT_SUPPORTED or
FUNCTION_NOT_FOUND (an older driver) mean "this GPU does not have it" and the metric is omitted (a plain
board read is not retried until rediscovery); GPU_IS_LOST reports the device down, with only its up
series; any other error drops that one value for this tick and is logged once, not every second. Calls
that drivers have in several versions are made in the newest the driver has (nvml_calls.Versioned).

The read groups beyond the basics are collectors, as node_exporter has them (`--collector.NAME`,
COLLECTORS): each can be switched off, and each reports its success and duration.

The array answers (field values, utilization samples, processes, per-process samples) are read with one
driver call each into buffers each GPU keeps (nvml_buffers.py) and unpacked from the raw bytes.

XID errors arrive as NVML events. A watcher thread waits on an event set and counts every event per
GPU and XID code, so repeated errors are counted, not overwritten.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpulens.core import metrics as m
from gpulens.core.status import CollectorStatus, LoopGuard, ProblemLog
from gpulens.core.topology import Pair
from gpulens.exporter.sources.base import DeviceSample, NodeSample, ProcessSample, Source, SourceUnavailable
from gpulens.exporter.sources.nvml_buffers import RUNNING_PROCESSES, DeviceBuffers
from gpulens.exporter.sources.nvml_calls import COLLECTORS, DeviceLost, NvmlCalls, Outcome, Version, Versioned

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
#: Of each nvmlGpmMetric_t answer (metricId, nvmlReturn, value, metricInfo's three pointers: 40 bytes), its
#: nvmlReturn and value, for the metrics asked, in _GPM_METRICS order.
_GPM_ANSWERS = struct.Struct("=" + "4xId24x" * len(_GPM_METRICS))
#: Of an nvmlFieldValue_t (fieldId, scopeId, timestamp, latencyUsec, valueType: 28 bytes), its nvmlReturn and
#: the 8-byte nvmlValue_t union, read as unsigned long long (an unsigned int value is its low half: NVIDIA hosts
#: are little-endian).
_FIELD_VALUE = struct.Struct("=28xIQ")
#: Of an nvmlProcessInfo_t (pid, padding, usedGpuMemory, gpuInstanceId, computeInstanceId): pid and usedGpuMemory,
#: by the version of the running-processes call that filled it (the first version's has only those two).
_PROCESS_INFO = {version: struct.Struct("=I4xQ8x") for version in RUNNING_PROCESSES[:-1]}
_PROCESS_INFO[RUNNING_PROCESSES[-1]] = struct.Struct("=I4xQ")
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long
#: Of an nvmlProcessUtilizationSample_t (pid, padding, timeStamp, smUtil, memUtil, encUtil, decUtil): pid,
#: timeStamp and smUtil.
_PROCESS_SAMPLE = struct.Struct("=I4xQI12x")
#: NVLink error counters over all links (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL), by gpulens' type label.
_NVLINK_ERROR_FIELDS = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
_NVLINK_GET_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE, one link per scopeId (Hopper and newer)
#: Link states that carry traffic: NVML_NVLINK_STATE_ACTIVE (= NVML_FEATURE_ENABLED of
#: nvmlDeviceGetNvLinkState) and NVML_NVLINK_STATE_SLEEP (low power between transfers).
_NVLINK_UP_STATES = (1, 2)
_NVLINK_UP_FIELDS = {(0, state) for state in _NVLINK_UP_STATES}  # (NVML_SUCCESS, state) as unpacked
#: GPM needs two samples at least this far apart (NVML documentation: more than 100 ms).
_GPM_MIN_SPACING_SECONDS = 0.1


#: One plain board read: the spec it feeds, the pynvml function, its arguments after the device handle, the
#: factor to base units, and the spec's extra label values.
_BoardRead = tuple[m.MetricSpec, Callable[..., Any], tuple[Any, ...], float, tuple[str, ...]]


@dataclass
class _Device:
    """A full GPU or MIG instance as discovered, with what never changes while it exists."""

    handle: object
    gpu: str
    uuid: str
    model: str
    #: Where the array answers of this device's per-tick reads land (nvml_buffers.py).
    buffers: DeviceBuffers
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
    #: What the counter fields (the first of board_fields) feed: spec, factor to base units, extra labels.
    counter_fields: list[tuple[m.MetricSpec, float, tuple[str, ...]]] = field(default_factory=list)
    #: The plain board reads (NvmlSource._board_reads), less those the GPU refused since discovery.
    board_reads: list[_BoardRead] = field(default_factory=list)
    #: The GPM request, its metric ids set once: each tick sets only the two samples.
    gpm_request: Any = None
    gpm_answers_at: int = 0  # the address of its metrics array
    links_down: tuple[int, ...] = ()
    #: The board's maxima (PCIe generation and width, SM clock), read at discovery, in base units.
    limits: dict[m.MetricSpec, float] = field(default_factory=dict)

    def carry_over(self, previous: _Device) -> None:
        """Keep what the driver's sample buffers were last read up to, across a rediscovery."""
        self.process_timestamp = previous.process_timestamp
        self.samples_seen = previous.samples_seen
        self.samples_unsupported = previous.samples_unsupported
        self.utilization, self.memory_utilization = previous.utilization, previous.memory_utilization
        self.links_down = previous.links_down  # logged when they changed, not again at each rediscovery


class NvmlSource(Source):
    name = "nvml"

    def __init__(
        self,
        event_wait_ms: int = 500,
        rediscover_seconds: float = 60.0,
        collectors: frozenset[str] = frozenset(COLLECTORS),
    ):
        #: Devices are re-enumerated this often, to see MIG reconfiguration and GPUs coming back.
        self.rediscover_seconds = rediscover_seconds
        #: The enabled collectors of COLLECTORS.
        self.collectors = collectors
        self._event_wait_ms = event_wait_ms
        self._devices: list[_Device] = []
        self._discovered_at = 0.0
        self._xids: Counter[tuple[str, str]] = Counter()
        self._xid_lock = threading.Lock()
        self._xids_watched: set[str] = set()  # the GPUs registered for XID events
        self._xid_failing = False  # the XID watcher could not register a GPU, or its last wait failed
        self._stop = threading.Event()
        self._problems = ProblemLog(log)
        self._xid_guard = LoopGuard(log, "watching for XID events")
        self._process_names: dict[int, str] = {}
        self.driver_version = ""
        self.nvml_version = ""
        self._topology: list[Pair] = []
        #: Every full GPU enumerated since the start, by UUID: one that leaves the enumeration stays expected.
        self._expected: dict[str, _Device] = {}

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
        self.calls = NvmlCalls(pynvml, self._problems, tuple(self.collectors))
        # The XID watcher's thread sorts its own calls: its failures must not count against whichever
        # collector the sampler's thread is reading at that moment.
        self._xid_calls = NvmlCalls(pynvml, self._problems)
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
        self._processes = Versioned(
            pynvml,
            [Version(name, partial(DeviceBuffers.running_processes, version=name)) for name in RUNNING_PROCESSES],
        )
        self.driver_version = self._optional(pynvml.nvmlSystemGetDriverVersion) or ""
        self.nvml_version = self._optional(pynvml.nvmlSystemGetNVMLVersion) or ""
        self._discover()
        if "xid" in self.collectors:
            threading.Thread(target=self._watch_xids, name="gpulens-xid", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        for d in self._devices:
            self._free_gpm(d)
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
        for d in self._devices:
            self._free_gpm(d)
        devices: list[_Device] = []
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
                    devices.append(previous)
                    devices.extend(d for d in self._devices if d.parent_uuid == previous.uuid)
                else:
                    unknown = _Device(None, str(index), f"unknown-gpu-{index}", "", DeviceBuffers(nvml, None))
                    devices.append(unknown)
                    self._problems.problem(f"discover{index}", f"GPU {index} cannot be opened: {e}")
                continue
            name = self._optional(nvml.nvmlDeviceGetName, handle) or ""
            gpu = _Device(handle, str(index), uuid, name, DeviceBuffers(nvml, handle))
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
            gpu.board_reads = self._board_reads()
            self._read_limits(gpu)
            devices.append(gpu)
            if gpu.mig_mode == "enabled":
                devices.extend(self._discover_mig(gpu))
        self._keep_missing(devices)
        self._devices = devices
        self._discovered_at = time.monotonic()
        if "topology" in self.collectors:
            with self.calls.collector("topology"):
                gpus = [d for d in devices if d.handle is not None and d.mig_mode != "instance"]
                self._topology = self._read_topology(gpus)

    def _keep_missing(self, devices: list[_Device]) -> None:
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
                _Device(None, gone.gpu, uuid, gone.model, DeviceBuffers(self.nvml, None), pci_bus_id=gone.pci_bus_id)
            )

    def _discover_mig(self, parent: _Device) -> list[_Device]:
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
                _Device(
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
                    gpm_supported=parent.gpm_supported,
                )
            )
        return found

    def _discover_links(self, gpu: _Device) -> None:
        """How many NVLinks the GPU has, and the fields to read each tick."""
        nvml = self.nvml
        count = None
        if "nvlink" in self.collectors:
            count = self._optional(nvml.nvmlDeviceGetFieldValues, gpu.handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        if count is not None and count[0].nvmlReturn == nvml.NVML_SUCCESS:
            gpu.nvlink_links = count[0].value.uiVal
        gpu.counter_fields = [(m.PCIE_TRANSMIT, 1.0, ()), (m.PCIE_RECEIVE, 1.0, ())]
        gpu.board_fields = [nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
        if gpu.nvlink_links:
            gpu.counter_fields += [
                (m.NVLINK_TRANSMIT, 1024.0, ()),  # KiB
                (m.NVLINK_RECEIVE, 1024.0, ()),
                *((m.NVLINK_ERRORS, 1.0, (kind,)) for kind in _NVLINK_ERROR_FIELDS),
            ]
            gpu.board_fields += [
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                *_NVLINK_ERROR_FIELDS.values(),
                *((_NVLINK_GET_STATE, link) for link in range(gpu.nvlink_links)),
            ]

    def _gpm_supported(self, handle: Any) -> bool:
        if "gpm" not in self.collectors:
            return False
        support = self._optional(self.nvml.nvmlGpmQueryDeviceSupport, handle)
        return support is not None and bool(support.isSupportedDevice)

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
        self.calls.end_tick()
        return NodeSample(devices, self.driver_version, self.nvml_version, self._topology)

    def call(self, d: _Device, fn: Callable[..., Any], *args: Any) -> Any:
        """A read of GPU `d` through the choke point: its value, or None where unsupported or failing
        this tick; DeviceLost raised where the GPU fell off the bus."""
        return self.calls.call(fn, *args, device=d.gpu)

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
        memory = call(d, self._memory, h)
        if memory is not None:
            s.set(m.MEMORY_USED, memory.used)
            s.set(m.MEMORY_TOTAL, memory.total)
            s.set(m.MEMORY_RESERVED, getattr(memory, "reserved", None))  # not in the first version
        if d.gpm_supported:
            with self.calls.collector("gpm"):
                self._read_gpm(d, s)
        if not instance:
            self._read_board(d, s)
        if "processes" in self.collectors:
            with self.calls.collector("processes"):
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

    def _board_reads(self) -> list[_BoardRead]:
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

    def _read_limits(self, gpu: _Device) -> None:
        """What the board can do at most, read at discovery: it does not change while the GPU is there."""
        nvml, h = self.nvml, gpu.handle
        for spec, value in (
            (m.PCIE_LINK_MAX_GENERATION, self._optional(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h)),
            (m.PCIE_LINK_MAX_WIDTH, self._optional(nvml.nvmlDeviceGetMaxPcieLinkWidth, h)),
            (m.SM_CLOCK_MAX, _scaled(self._optional(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM), 1e6)),
        ):
            if value is not None:
                gpu.limits[spec] = float(value)

    def _read_board(self, d: _Device, s: DeviceSample) -> None:
        """What only a physical GPU has: links, clocks, power, temperature, errors."""
        nvml, h, call = self.nvml, d.handle, self.call
        fields = call(d, d.buffers.field_values, d.board_fields)
        if fields is not None:
            if "nvlink" in self.collectors:
                with self.calls.collector("nvlink"):
                    self._read_links(d, s, fields)
            else:
                self._read_counters(d, s, fields)
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
        if "xid" in self.collectors:
            with self.calls.collector("xid"), self._xid_lock:
                if self._xid_failing:
                    self.calls.mark_failed()
                s.xids_watched = d.uuid in self._xids_watched
                for (uuid, xid), count in self._xids.items():
                    if uuid == d.uuid:
                        s.set(m.XID_ERRORS, count, xid)

    def _read_counters(self, d: _Device, s: DeviceSample, fields: bytes) -> list[tuple[int, int]]:
        """The PCIe (and NVLink) counters of one field-values read, unpacked from the raw array (pynvml's
        structures convert every attribute read in Python); returns every (nvmlReturn, value) read."""
        ok, out = self.nvml.NVML_SUCCESS, s.values
        values = list(_FIELD_VALUE.iter_unpack(fields))  # (nvmlReturn, value): the counters, then the states
        for (ret, value), (spec, factor, labels) in zip(values, d.counter_fields, strict=False):
            if ret == ok:
                out.setdefault(spec, {})[labels] = value * factor
        return values

    def _read_links(self, d: _Device, s: DeviceSample, fields: bytes) -> None:
        """PCIe and NVLink traffic, NVLink errors and the state of every link, from one field-values read."""
        ok = self.nvml.NVML_SUCCESS
        values = self._read_counters(d, s, fields)
        s.set(m.NVLINK_LINKS, d.nvlink_links)
        if not d.nvlink_links:
            return
        states = values[len(d.counter_fields) :]
        if states and set(states) <= _NVLINK_UP_FIELDS:  # the common case, in one step: every link up
            down: tuple[int, ...] = ()
        elif states and all(ret == ok for ret, _ in states):
            down = tuple(link for link, (_, state) in enumerate(states) if state & 0xFFFFFFFF not in _NVLINK_UP_STATES)
        else:
            if states:  # before Hopper the state is no field: one call per link from now on
                d.board_fields = d.board_fields[: len(d.counter_fields)]
            down_links = []
            for link in range(d.nvlink_links):
                state = self.call(d, self.nvml.nvmlDeviceGetNvLinkState, d.handle, link)
                if state is None:
                    return
                if state not in _NVLINK_UP_STATES:
                    down_links.append(link)
            down = tuple(down_links)
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
            self._optional(nvml.nvmlGpmSampleFree, sample)
            return
        previous, spacing = d.gpm_previous, now - d.gpm_previous_at
        if previous is not None and spacing >= _GPM_MIN_SPACING_SECONDS:
            request = d.gpm_request
            if request is None:
                d.gpm_request = request = nvml.c_nvmlGpmMetricsGet_t()
                request.version = nvml.NVML_GPM_METRICS_GET_VERSION
                request.numMetrics = len(_GPM_METRICS)
                for i, metric_id in enumerate(_GPM_METRICS):
                    request.metrics[i].metricId = metric_id
                d.gpm_answers_at = ctypes.addressof(request) + type(request).metrics.offset
            request.sample1, request.sample2 = previous, sample
            if self.call(d, nvml.nvmlGpmMetricsGet, request) is not None:
                # The answers unpacked from the raw array: pynvml's structures convert every attribute read.
                answers = _GPM_ANSWERS.unpack(ctypes.string_at(d.gpm_answers_at, _GPM_ANSWERS.size))
                for spec, ret, percent in zip(_GPM_METRICS.values(), answers[::2], answers[1::2], strict=True):
                    if ret == nvml.NVML_SUCCESS:
                        s.values[spec] = {(): round(min(max(percent / 100, 0.0), 1.0), 6)}
        elif previous is not None:
            self._optional(nvml.nvmlGpmSampleFree, sample)  # too close to the previous one: keep the older sample
            return
        if previous is not None:
            self._optional(nvml.nvmlGpmSampleFree, previous)
        d.gpm_previous, d.gpm_previous_at = sample, now

    def _free_gpm(self, d: _Device) -> None:
        if d.gpm_previous is not None:
            self._optional(self.nvml.nvmlGpmSampleFree, d.gpm_previous)
            d.gpm_previous = None

    def _read_processes(self, d: _Device, s: DeviceSample) -> None:
        nvml = self.nvml
        if d.mig_mode == "enabled":
            return  # processes are reported on the MIG instances they run in
        raw = self.call(d, self._processes, d.buffers)
        if raw is None:
            return
        processes = list(_PROCESS_INFO[self._processes.version].iter_unpack(raw))  # (pid, GPU memory in bytes)
        # Per PID, the driver's samples newer than the last read (the driver filters by lastSeenTimeStamp):
        # (unix seconds, SM share 0-1). The first read returns whatever the driver kept before the exporter
        # started: averaged into the gauge, but not samples of ours.
        by_pid: dict[int, list[tuple[float, float]]] | None = None
        seen = d.process_timestamp
        if processes and d.mig_mode != "instance":  # NVML has no per-process utilization on MIG
            by_pid = {}
            try:
                raw = d.buffers.process_utilization(seen)
            except nvml.NVMLError as e:
                # NOTHING (NOT_FOUND): no samples since last time, that is no activity.
                if self.calls.sort(e, "nvmlDeviceGetProcessUtilization", d.gpu) is not Outcome.NOTHING:
                    by_pid = None
            else:
                newest = seen
                for pid, timestamp, sm in _PROCESS_SAMPLE.iter_unpack(raw):  # (pid, us, percent)
                    sample = (timestamp / 1e6, sm / 100)
                    pid_samples = by_pid.get(pid)
                    if pid_samples is None:
                        by_pid[pid] = [sample]
                    else:
                        pid_samples.append(sample)
                    if timestamp > newest:
                        newest = timestamp
                d.process_timestamp = newest
        names = self._process_names
        for pid, memory in processes:
            name = names.get(pid)
            if name is None:
                name = self._optional(nvml.nvmlSystemGetProcessName, pid) or ""
                names[pid] = name = name.rsplit("/", 1)[-1]
            utilization = samples = None
            if by_pid is not None:
                samples = by_pid.get(pid, [])
                utilization = sum([v for _, v in samples]) / len(samples) if samples else 0.0
                if not seen:
                    samples = None
            if memory == _NOT_AVAILABLE:  # NVML_VALUE_NOT_AVAILABLE: Windows WDDM, some vGPU profiles
                memory = None
            s.processes.append(ProcessSample(pid, name, memory, utilization, samples=samples))
        if len(self._process_names) > 4096:  # PIDs are reused; forget names now and then
            self._process_names.clear()

    # --- XID events ----------------------------------------------------------------------------
    def _watch_xids(self) -> None:
        nvml, calls = self.nvml, self._xid_calls
        event_set = calls.call(nvml.nvmlEventSetCreate)
        if event_set is None:
            self._xid_failing = True  # logged by the choke point: XID events are unavailable
            return
        handles: dict[int, str] = {}
        unwatched = False
        for d in self._devices:
            if d.handle is not None and d.mig_mode != "instance":
                try:
                    nvml.nvmlDeviceRegisterEvents(d.handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                except nvml.NVMLError as e:
                    # A GPU that cannot be watched (UNSUPPORTED or not) leaves its XIDs unknown: a failure.
                    calls.sort(e, f"nvmlDeviceRegisterEvents (GPU {d.gpu})")
                    unwatched = True
                    continue
                handles[_handle_key(d.handle)] = d.uuid
                with self._xid_lock:
                    self._xids_watched.add(d.uuid)
        while not self._stop.is_set():
            if not self._xid_guard.call(lambda: self._wait_for_xid(event_set, handles, unwatched)):
                self._stop.wait(self._xid_guard.delay(1.0))
        calls.call(nvml.nvmlEventSetFree, event_set)

    def _wait_for_xid(self, event_set: Any, handles: dict[int, str], unwatched: bool) -> None:
        """Wait up to the event wait time for one XID event and count it."""
        nvml = self.nvml
        try:
            event = nvml.nvmlEventSetWait(event_set, self._event_wait_ms)
        except nvml.NVMLError as e:
            failed = self._xid_calls.sort(e, "nvmlEventSetWait") is Outcome.FAILED
            self._xid_failing = unwatched or failed
            if failed:
                self._stop.wait(1.0)
            return
        self._xid_failing = unwatched
        uuid = handles.get(_handle_key(event.device))
        if uuid is not None and event.eventType == nvml.nvmlEventTypeXidCriticalError:
            with self._xid_lock:
                self._xids[(uuid, str(event.eventData))] += 1

    def loop_errors(self) -> int:
        return self._xid_guard.errors


def _handle_key(handle: Any) -> int:
    """nvmlDevice_t handles are pointers; compare them by address."""
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
