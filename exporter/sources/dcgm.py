"""The DCGM source: reads a node's dcgm-exporter /metrics and maps DCGM fields to gpulens metrics.

On GPUs before Hopper, DCGM is the only source of SM activity, occupancy, tensor and DRAM activity.
dcgm-exporter is fetched over HTTP on its own thread (a slow endpoint never delays NVML sampling),
parsed line by line (one broken line loses that line, not the scrape), and mapped by field meaning:
legacy names (DCGM_FI_PROF_SM_ACTIVE) and DCGM 4.6's (DCGM_FI_PROF_SM_UTIL_RATIO) alike. A renamed
field keeps its field ID and so its unit: DCGM_FI_DEV_GPU_UTIL_RATIO is still a percentage.

dcgm-exporter labels a MIG instance's rows with its parent's UUID plus GPU_I_ID and GPU_I_PROFILE,
and repeats board-level fields (power, clocks, temperature) on every instance; board fields go to the
physical GPU, instance fields (activity, memory) to the instance.

Values DCGM cannot provide arrive as blank sentinels (e.g. 9223372036854775794, DCGM_INT64_NOT_SUPPORTED)
or as text (ERROR - FAILED TO CONVERT TO STRING); they are dropped, never exported as numbers.
"""
from __future__ import annotations

import logging
import math
import re
import threading
import time
from dataclasses import dataclass, field

import requests

from gpulens.core import metrics as m
from gpulens.exporter.attribution.attributor import Attribution, AttributionState
from gpulens.exporter.attribution.kubelet import DeviceRef
from gpulens.exporter.sources.base import DeviceSample, NodeSample, PodRef, Source, SourceUnavailable
from gpulens.core.status import CollectorStatus, ProblemLog

log = logging.getLogger(__name__)

MIB = 1024**2


@dataclass(frozen=True)
class Field:
    """A DCGM field by meaning: its names, the gpulens metric, the factor to base units, and
    whether it describes the physical board or the (MIG) instance a row is labelled with.
    kind: "gauge" (a value), "counter" (cumulative), "rate" (per second: integrated into a counter)."""

    names: tuple[str, ...]
    spec: m.MetricSpec | None
    scale: float = 1.0
    board: bool = True
    kind: str = "gauge"
    extra: tuple[str, ...] = ()  # extra label values of the spec


FIELDS: list[Field] = [
    Field(("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"), m.UTILIZATION, 0.01),
    Field(("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL_RATIO"), m.MEMORY_CONTROLLER_UTILIZATION, 0.01),
    Field(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"), m.GRAPHICS_ENGINE_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO"), m.SM_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO"), m.SM_OCCUPANCY, board=False),
    Field(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO"), m.TENSOR_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO"), m.DRAM_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_PROF_FP64_UTIL_RATIO"), m.FP64_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO"), m.FP32_ACTIVE, board=False),
    Field(("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO"), m.FP16_ACTIVE, board=False),
    Field(("DCGM_FI_DEV_FB_USED",), m.MEMORY_USED, MIB, board=False),
    Field(("DCGM_FI_DEV_FB_TOTAL",), m.MEMORY_TOTAL, MIB, board=False),
    Field(("DCGM_FI_DEV_FB_RESERVED",), m.MEMORY_RESERVED, MIB, board=False),
    Field(("DCGM_FI_PROF_PCIE_TX_BYTES",), m.PCIE_TRANSMIT, kind="rate"),
    Field(("DCGM_FI_PROF_PCIE_RX_BYTES",), m.PCIE_RECEIVE, kind="rate"),
    Field(("DCGM_FI_PROF_NVLINK_TX_BYTES",), m.NVLINK_TRANSMIT, kind="rate"),
    Field(("DCGM_FI_PROF_NVLINK_RX_BYTES",), m.NVLINK_RECEIVE, kind="rate"),
    Field(("DCGM_FI_DEV_PCIE_LINK_GEN",), m.PCIE_LINK_GENERATION),
    Field(("DCGM_FI_DEV_PCIE_MAX_LINK_GEN",), m.PCIE_LINK_MAX_GENERATION),
    Field(("DCGM_FI_DEV_PCIE_LINK_WIDTH",), m.PCIE_LINK_WIDTH),
    Field(("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH",), m.PCIE_LINK_MAX_WIDTH),
    Field(("DCGM_FI_DEV_SM_CLOCK",), m.SM_CLOCK, 1e6),
    Field(("DCGM_FI_DEV_MAX_SM_CLOCK",), m.SM_CLOCK_MAX, 1e6),
    Field(("DCGM_FI_DEV_MEM_CLOCK",), m.MEMORY_CLOCK, 1e6),
    Field(("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS"), m.POWER),
    Field(("DCGM_FI_DEV_ENFORCED_POWER_LIMIT",), m.POWER_LIMIT),
    Field(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), m.ENERGY, 1e-3, kind="counter"),
    Field(("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"), m.TEMPERATURE),
    Field(("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), None),  # bitmask
    Field(("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",), m.ECC_ERRORS, kind="counter", extra=("corrected",)),
    Field(("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",), m.ECC_ERRORS, kind="counter", extra=("uncorrected",)),
    Field(("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"),
          m.REMAPPED_ROWS, extra=("correctable",)),
    Field(("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"),
          m.REMAPPED_ROWS, extra=("uncorrectable",)),
    Field(("DCGM_FI_DEV_ROW_REMAP_PENDING",), m.ROW_REMAP_PENDING),
    Field(("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED"), m.ROW_REMAP_FAILED),
    # Violation counters are nanoseconds of clocks held down for each reason.
    Field(("DCGM_FI_DEV_POWER_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("power",)),
    Field(("DCGM_FI_DEV_THERMAL_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("thermal",)),
    Field(("DCGM_FI_DEV_SYNC_BOOST_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter",
          extra=("sync_boost",)),
    Field(("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter",
          extra=("board_limit",)),
    Field(("DCGM_FI_DEV_LOW_UTIL_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("low_util",)),
    Field(("DCGM_FI_DEV_RELIABILITY_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter",
          extra=("reliability",)),
]
BY_NAME: dict[str, Field] = {name: f for f in FIELDS for name in f.names}
_FB_FREE = "DCGM_FI_DEV_FB_FREE"
_THROTTLE = BY_NAME["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]


# --- parsing -------------------------------------------------------------------------------------
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def is_blank(value: float) -> bool:
    """DCGM's blank and not-supported sentinels (dcgm_structs.h DCGM_*_BLANK and the values just
    above them), as dcgm-exporter prints them."""
    return (value >= 9223372036854775792.0  # DCGM_INT64_BLANK 0x7ffffffffffffff0 and up
            or 2147483632.0 <= value <= 2147483647.0  # DCGM_INT32_BLANK 0x7ffffff0 and up
            or 140737488355328.0 <= value <= 140737488355333.0)  # DCGM_FP64_BLANK 2^47 and up


@dataclass
class Parsed:
    """The usable rows of one scrape and what was wrong with the rest."""

    rows: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    unparsable: int = 0  # lines that are not Prometheus text (HTML, truncation, garbage)
    unusable: int = 0  # sentinels, NaN, text instead of a number
    duplicates: int = 0


def parse_exposition(text: str) -> Parsed:
    out = Parsed()
    seen: set[tuple[str, tuple]] = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            out.unparsable += 1
            continue
        name, label_text, raw = match.groups()
        labels = {}
        if label_text:
            consumed = 0
            for lm in _LABEL.finditer(label_text):
                if lm.start() != consumed:
                    break
                labels[lm.group(1)] = re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], lm.group(2))
                consumed = lm.end()
            if consumed != len(label_text.rstrip()):
                out.unparsable += 1
                continue
        try:
            value = float(raw)
        except ValueError:
            out.unusable += 1  # "ERROR - FAILED TO CONVERT TO STRING" splits into words: the line never matches
            continue
        if math.isnan(value) or math.isinf(value) or is_blank(value):
            out.unusable += 1
            continue
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            out.duplicates += 1
            continue
        seen.add(key)
        out.rows.append((name, labels, value))
    return out


def _label(labels: dict[str, str], *names: str) -> str:
    """The first present of several spellings: modelName/model_name, Hostname/hostname, ..."""
    for name in names:
        if labels.get(name):
            return labels[name]
    return ""


# --- mapping rows to devices ---------------------------------------------------------------------
@dataclass
class DcgmDevice:
    """What one dcgm-exporter scrape says about one GPU or MIG instance."""

    gpu: str  # "0" or "0/gi7"
    uuid: str  # the GPU's UUID; for a MIG instance its parent's (dcgm-exporter has no MIG UUID)
    gpu_instance_id: int | None
    model: str = ""
    pci_bus_id: str = ""
    mig_profile: str = ""
    values: dict[tuple[m.MetricSpec, tuple[str, ...]], float] = field(default_factory=dict)
    rates: dict[m.MetricSpec, float] = field(default_factory=dict)  # bytes per second
    clock_event_reasons: int | None = None
    pod: PodRef | None = None


def devices_from_rows(rows) -> dict[tuple[str, int | None], DcgmDevice]:
    """Group rows by (GPU UUID, GPU instance id or None) and map each field."""
    devices: dict[tuple[str, int | None], DcgmDevice] = {}
    free: dict[tuple[str, int | None], float] = {}
    for name, labels, value in rows:
        uuid = _label(labels, "UUID", "uuid")
        if not uuid:
            continue
        gi_text = _label(labels, "GPU_I_ID", "gpu_i_id")
        gi = int(gi_text) if gi_text.isdigit() else None
        gpu = _label(labels, "gpu", "GPU")
        f = BY_NAME.get(name)
        if name == _FB_FREE:
            f_board = False
        elif f is None:
            continue
        else:
            f_board = f.board
        key = (uuid, None if f_board else gi)
        device = devices.get(key)
        if device is None:
            device = devices[key] = DcgmDevice(
                gpu=f"{gpu}/gi{key[1]}" if key[1] is not None else gpu, uuid=uuid, gpu_instance_id=key[1],
                model=_label(labels, "modelName", "model_name", "modelname"),
                pci_bus_id=_label(labels, "pci_bus_id", "PCI_BUS_ID"),
                mig_profile=_label(labels, "GPU_I_PROFILE", "gpu_i_profile") if key[1] is not None else "")
        if device.pod is None:
            pod = _label(labels, "exported_pod", "pod")
            if pod:
                device.pod = PodRef(_label(labels, "exported_namespace", "namespace"), pod,
                                    _label(labels, "exported_container", "container"))
        if name == _FB_FREE:
            free[key] = value * MIB
        elif f is _THROTTLE:
            device.clock_event_reasons = int(value)
        elif f.kind == "rate":
            device.rates[f.spec] = value * f.scale
        else:
            device.values.setdefault((f.spec, f.extra), value * f.scale)
    for key, free_bytes in free.items():
        # dcgm-exporter's stock fields have no total: used + free (+ reserved where reported).
        device = devices[key]
        used = device.values.get((m.MEMORY_USED, ()))
        if used is not None and (m.MEMORY_TOTAL, ()) not in device.values:
            device.values[(m.MEMORY_TOTAL, ())] = used + free_bytes + device.values.get((m.MEMORY_RESERVED, ()), 0.0)
    return devices


# --- fetching ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DcgmReading:
    """The latest good scrape, with cumulative counters integrated from its rate fields."""

    devices: dict[tuple[str, int | None], DcgmDevice]
    fetched_at: float  # time.monotonic()
    counters: dict[tuple[str, int | None, m.MetricSpec], float]  # integrated bytes from rate fields


class DcgmFetcher:
    """Fetches dcgm-exporter every `interval` seconds on a background thread, with one keep-alive
    session. Values older than `max_age` seconds are not served: a dcgm-exporter that stopped
    answering must not look like a GPU frozen at its last reading."""

    name = "dcgm"

    def __init__(self, url: str, interval: float = 5.0, timeout: float = 2.0, max_age: float | None = None,
                 clock=time.monotonic):
        self.url = url
        self.interval = interval
        self.timeout = timeout
        self.max_age = max_age if max_age is not None else 3 * interval
        self.clock = clock
        self.session = requests.Session()
        self.status = CollectorStatus()
        self._reading: DcgmReading | None = None
        self._counters: dict[tuple[str, int | None, m.MetricSpec], float] = {}
        self._problems = ProblemLog(log)
        self._stop = threading.Event()

    def fetch(self) -> None:
        """One scrape of dcgm-exporter; on failure the previous reading stays until it ages out."""
        started = self.clock()
        try:
            response = self.session.get(self.url, timeout=self.timeout)
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            parsed = parse_exposition(response.text)
            if not parsed.rows:
                kind = response.headers.get("Content-Type", "no Content-Type")
                raise ValueError(f"no DCGM metrics in the answer ({kind}, {len(response.content)} bytes): "
                                 "is this dcgm-exporter's /metrics?")
            devices = devices_from_rows(parsed.rows)
        except (requests.RequestException, ValueError) as e:
            reason = "timed out" if isinstance(e, requests.Timeout) else str(e)
            self.status = CollectorStatus(False, self.clock() - started, self.status.failures + 1)
            self._problems.problem("fetch", f"cannot read dcgm-exporter at {self.url}: {reason}; "
                                   "DCGM fields age out, NVML fields are unaffected")
            return
        now = self.clock()
        previous = self._reading
        if previous is not None:
            elapsed = now - previous.fetched_at
            # Each rate value is the average over dcgm-exporter's last collect interval; weight it by
            # the time since the previous reading, skipping gaps after an outage.
            if elapsed <= self.max_age:
                for key, device in devices.items():
                    for spec, rate in device.rates.items():
                        counter = (device.uuid, device.gpu_instance_id, spec)
                        self._counters[counter] = self._counters.get(counter, 0.0) + rate * elapsed
        for key, device in devices.items():
            for spec in device.rates:
                self._counters.setdefault((device.uuid, device.gpu_instance_id, spec), 0.0)
        self._reading = DcgmReading(devices, now, dict(self._counters))
        self.status = CollectorStatus(True, now - started, self.status.failures)
        if parsed.unusable or parsed.unparsable or parsed.duplicates:
            log.debug("dcgm-exporter %s: %d unusable values, %d unparsable lines, %d duplicates dropped",
                      self.url, parsed.unusable, parsed.unparsable, parsed.duplicates)
        self._problems.resolved("fetch", f"dcgm-exporter at {self.url} answers again")

    def reading(self) -> DcgmReading | None:
        """The latest reading, or None when there is none younger than max_age."""
        reading = self._reading
        if reading is None or self.clock() - reading.fetched_at > self.max_age:
            return None
        return reading

    def start(self) -> None:
        self.fetch()
        threading.Thread(target=self._run, name="gpulens-dcgm", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.fetch()

    def close(self) -> None:
        self._stop.set()
        self.session.close()


def apply(reading: DcgmReading, dcgm: DcgmDevice, sample: DeviceSample) -> None:
    """Fill what `sample` lacks from DCGM: the better source already there wins, and every value
    taken is marked as DCGM's."""
    for (spec, extra), value in dcgm.values.items():
        if sample.get(spec, *extra) is None:
            sample.set(spec, value, *extra)
            sample.sources[spec] = "dcgm"
    for spec in dcgm.rates:
        if sample.get(spec) is None:
            sample.set(spec, reading.counters.get((dcgm.uuid, dcgm.gpu_instance_id, spec), 0.0))
            sample.sources[spec] = "dcgm"
    if sample.clock_event_reasons is None and dcgm.clock_event_reasons is not None:
        sample.clock_event_reasons = dcgm.clock_event_reasons
        sample.sources[m.CLOCK_EVENT_ACTIVE] = "dcgm"


class MergedSource(Source):
    """NVML first, DCGM for what NVML lacks on the same GPU (profiling fields on GPUs without GPM),
    matched by GPU UUID (MIG instances by parent UUID and GPU instance id), never exported twice."""

    def __init__(self, nvml: Source, fetcher: DcgmFetcher):
        self.nvml = nvml
        self.fetcher = fetcher
        self.name = nvml.name

    def start(self) -> None:
        self.nvml.start()
        self.fetcher.start()

    def close(self) -> None:
        self.fetcher.close()
        self.nvml.close()

    def sample(self) -> NodeSample:
        node = self.nvml.sample()
        reading = self.fetcher.reading()
        if reading is None:
            return node
        for d in node.devices:
            if not d.up:
                continue
            if d.mig_mode == "instance":
                gi = int(d.gpu.rpartition("/gi")[2])
                dcgm = reading.devices.get((d.parent_uuid, gi))
            else:
                dcgm = reading.devices.get((d.uuid, None))
            if dcgm is not None:
                apply(reading, dcgm, d)
        return node

    def statuses(self) -> dict[str, CollectorStatus]:
        return {self.fetcher.name: self.fetcher.status}


class DcgmSource(Source):
    """dcgm-exporter alone, for nodes where gpulens cannot load NVML itself. MIG instances have no
    UUID of their own in dcgm-exporter's output: they are named `<GPU UUID>/gi<id>`."""

    name = "dcgm"

    def __init__(self, fetcher: DcgmFetcher):
        self.fetcher = fetcher

    def start(self) -> None:
        self.fetcher.start()
        if self.fetcher.reading() is None:
            self.fetcher.close()
            raise SourceUnavailable(f"cannot read dcgm-exporter at {self.fetcher.url}: check --dcgm.url and that "
                                    "dcgm-exporter runs on this node (the log line above says why)")

    def close(self) -> None:
        self.fetcher.close()

    def sample(self) -> NodeSample:
        reading = self.fetcher.reading()
        if reading is None:
            raise RuntimeError(f"no reading of dcgm-exporter at {self.fetcher.url} younger than "
                               f"{self.fetcher.max_age:g} s")
        devices: list[DeviceSample] = []
        parents = {uuid for uuid, gi in reading.devices if gi is not None}
        for (uuid, gi), dcgm in sorted(reading.devices.items(), key=lambda kv: (kv[1].gpu, kv[0][1] or -1)):
            sample = DeviceSample(gpu=dcgm.gpu, uuid=uuid if gi is None else f"{uuid}/gi{gi}", model=dcgm.model,
                                  pci_bus_id=dcgm.pci_bus_id,
                                  mig_mode="instance" if gi is not None else "enabled" if uuid in parents else "disabled",
                                  mig_profile=dcgm.mig_profile, parent_uuid=uuid if gi is not None else "")
            apply(reading, dcgm, sample)
            devices.append(sample)
        return NodeSample(devices)


class DcgmAttribution(Attribution):
    """Pods as dcgm-exporter labelled them (pod/namespace/container, or exported_* when Prometheus
    renamed them), for --source=dcgm without a kubelet socket of our own."""

    name = ""

    def __init__(self, fetcher: DcgmFetcher):
        self.fetcher = fetcher

    def state(self) -> AttributionState:
        reading = self.fetcher.reading()
        if reading is None:
            return AttributionState()
        allocations = tuple((DeviceRef(uuid=uuid if gi is None else f"{uuid}/gi{gi}"), d.pod)
                            for (uuid, gi), d in reading.devices.items() if d.pod is not None)
        return AttributionState(True, allocations, 0, self.fetcher.status)

    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        return None, ""  # dcgm-exporter reports no processes
