"""The dcgm-exporter text format: parsing a scrape and mapping DCGM fields to gpulens metrics.

Used by the exporter's DCGM source (live scrapes) and by the analyzer (saved scrapes). Lines are
parsed one by one (one broken line loses that line, not the scrape) and fields are mapped by meaning:
legacy names (DCGM_FI_PROF_SM_ACTIVE) and DCGM 4.6's (DCGM_FI_PROF_SM_UTIL_RATIO) alike. A renamed
field keeps its field ID and so its unit: DCGM_FI_DEV_GPU_UTIL_RATIO is still a percentage.

dcgm-exporter labels a MIG instance's rows with its parent's UUID plus GPU_I_ID and GPU_I_PROFILE,
and repeats board-level fields (power, clocks, temperature) on every instance; board fields go to the
physical GPU, instance fields (activity, memory) to the instance.

Values DCGM cannot provide arrive as blank sentinels (e.g. 9223372036854775794, DCGM_INT64_NOT_SUPPORTED)
or as text (ERROR - FAILED TO CONVERT TO STRING); they are dropped, never exported as numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gpulens.core import metrics as m
from gpulens.core.pods import PodRef

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
    Field(
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"), m.GRAPHICS_ENGINE_ACTIVE, board=False
    ),
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
    Field(
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"),
        m.REMAPPED_ROWS,
        extra=("correctable",),
    ),
    Field(
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"),
        m.REMAPPED_ROWS,
        extra=("uncorrectable",),
    ),
    Field(("DCGM_FI_DEV_ROW_REMAP_PENDING",), m.ROW_REMAP_PENDING),
    Field(("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED"), m.ROW_REMAP_FAILED),
    # Violation counters are nanoseconds of clocks held down for each reason.
    Field(("DCGM_FI_DEV_POWER_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("power",)),
    Field(("DCGM_FI_DEV_THERMAL_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("thermal",)),
    Field(
        ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("sync_boost",)
    ),
    Field(
        ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("board_limit",)
    ),
    Field(("DCGM_FI_DEV_LOW_UTIL_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("low_util",)),
    Field(
        ("DCGM_FI_DEV_RELIABILITY_VIOLATION",), m.CLOCK_VIOLATION_SECONDS, 1e-9, kind="counter", extra=("reliability",)
    ),
]
BY_NAME: dict[str, Field] = {name: f for f in FIELDS for name in f.names}
_FB_FREE = "DCGM_FI_DEV_FB_FREE"
#: The code of the GPU's last XID (0: none yet), a gauge dcgm-exporter keeps until it restarts
#: (NVIDIA/dcgm-exporter#500): it says that the GPU reported that XID since then, not when.
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


# --- parsing -------------------------------------------------------------------------------------
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def is_blank(value: float) -> bool:
    """DCGM's blank and not-supported sentinels (dcgm_structs.h DCGM_*_BLANK and the values just
    above them), as dcgm-exporter prints them."""
    return (
        value >= 9223372036854775792.0  # DCGM_INT64_BLANK 0x7ffffffffffffff0 and up
        or 2147483632.0 <= value <= 2147483647.0  # DCGM_INT32_BLANK 0x7ffffff0 and up
        or 140737488355328.0 <= value <= 140737488355333.0
    )  # DCGM_FP64_BLANK 2^47 and up


#: One sample of a scrape: metric name, labels, value.
Row = tuple[str, dict[str, str], float]


@dataclass
class Parsed:
    """The usable rows of one scrape and what was wrong with the rest."""

    rows: list[Row] = field(default_factory=list)
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
    last_xid: int | None = None  # XID_FIELD, on the GPU and each of its instances
    pod: PodRef | None = None


def devices_from_rows(rows: list[Row]) -> dict[tuple[str, int | None], DcgmDevice]:
    """Group rows by (GPU UUID, GPU instance id or None) and map each field."""
    devices: dict[tuple[str, int | None], DcgmDevice] = {}
    free: dict[tuple[str, int | None], float] = {}
    for name, labels, value in rows:
        uuid = _label(labels, "UUID", "uuid")
        if not uuid:
            continue
        gi_text = _label(labels, "GPU_I_ID", "gpu_i_id")
        gi = int(gi_text) if gi_text.isascii() and gi_text.isdigit() else None  # "²".isdigit() too
        gpu = _label(labels, "gpu", "GPU")
        f = BY_NAME.get(name)
        if name in (_FB_FREE, XID_FIELD):
            f_board = False
        elif f is None:
            continue
        else:
            f_board = f.board
        key = (uuid, None if f_board else gi)
        device = devices.get(key)
        if device is None:
            device = devices[key] = DcgmDevice(
                gpu=f"{gpu}/gi{key[1]}" if key[1] is not None else gpu,
                uuid=uuid,
                gpu_instance_id=key[1],
                model=_label(labels, "modelName", "model_name", "modelname"),
                pci_bus_id=_label(labels, "pci_bus_id", "PCI_BUS_ID"),
                mig_profile=_label(labels, "GPU_I_PROFILE", "gpu_i_profile") if key[1] is not None else "",
            )
        if device.pod is None:
            pod = _label(labels, "exported_pod", "pod")
            if pod:
                device.pod = PodRef(
                    _label(labels, "exported_namespace", "namespace"),
                    pod,
                    _label(labels, "exported_container", "container"),
                )
        if name == XID_FIELD:
            device.last_xid = int(value)
        elif f is None:  # DCGM_FI_DEV_FB_FREE, for the total below
            free[key] = value * MIB
        elif f.spec is None:  # the clock-event reasons bitmask
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
