"""The trace schema: gpulens' one representation of GPU telemetry over time, which every input produces.

One row per GPU (or MIG instance) per sample. As a file (CSV, or Parquet), its columns are:

required  timestamp      RFC 3339 ("2026-11-21T10:00:00Z") or unix seconds
          gpu            GPU UUID or index
identity  node, gpu_model, namespace, pod, container
signals   gpu_util, sm_active, sm_occupancy, tensor_active, dram_active, gr_engine_active   ratios 0-1
          fp16_active, fp32_active, fp64_active                                           ratios 0-1
          memory_used_bytes, memory_total_bytes
          pcie_tx_bytes_per_second, pcie_rx_bytes_per_second
          nvlink_tx_bytes_per_second, nvlink_rx_bytes_per_second
          power_watts, temperature_celsius, sm_clock_hertz, sm_clock_max_hertz
          clock_event_reasons                       NVML bitmask (integer)
          cpu_usage_cores, cpu_limit_cores          of the pod
          restarts_total                            of the pod's container
          numa_node                                 the GPU's CPU socket
links     pcie_root, nvlink_group                   the GPU's PCIe root complex and NVLink island on its
                                                    node (core/topology.py)
          nvlink_links_down                         NVLinks down on the GPU
          nvlink_crc_errors_per_second, nvlink_replay_errors_per_second, nvlink_recovery_errors_per_second
                                                    (LINKS below)
faults    hardware_xid                              the hardware XID the GPU reported since its previous
                                                    row, 0 for none (XIDS below)
workload  workload_kind                             what the pod is: notebook, serving, job or unknown
          engine                                    its serving engine: vllm, tgi, triton, sglang ("" none)
                                                    (WORKLOAD below)
shape     activity_samples, activity_idle_ratio, activity_low_ratio, activity_high_ratio,
          activity_transitions, steady_bursts       since the GPU's previous row (SHAPE below)
memory    memory_reserved_bytes                     what the driver reserves of memory_total_bytes
                                                    (MEMORY below)

Any signal column may be absent or empty: the analyzer says what it could not judge without it.

This module is the schema only (no pandas): the exporter's recorder writes it, the analyzer reads it
(gpulens.analyzer.inputs.frame holds it as a DataFrame). The file format is documented in
docs/trace-format.md.
"""

from __future__ import annotations

from gpulens.core import metrics as m
from gpulens.core.activity import Totals

IDENTITY = ["node", "gpu_model", "namespace", "pod", "container"]
RATIOS = [
    "gpu_util",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "gr_engine_active",
    "fp16_active",
    "fp32_active",
    "fp64_active",
]
#: The ratios only profiling provides (NVML GPM on Hopper+, DCGM): all but utilization.
PROFILING = [c for c in RATIOS if c != "gpu_util"]
NUMBERS = [
    "memory_used_bytes",
    "memory_total_bytes",
    "pcie_tx_bytes_per_second",
    "pcie_rx_bytes_per_second",
    "nvlink_tx_bytes_per_second",
    "nvlink_rx_bytes_per_second",
    "power_watts",
    "temperature_celsius",
    "sm_clock_hertz",
    "sm_clock_max_hertz",
    "clock_event_reasons",
    "cpu_usage_cores",
    "cpu_limit_cores",
    "restarts_total",
    "numa_node",
]
SIGNALS = RATIOS + NUMBERS
#: Columns a trace carries for people (a recording, a file's table) that no verdict reads: a store is not
#: asked for them (a GPU's temperature was 6% of what a report of dcgm-exporter's series read).
#: tests/test_not_judged.py holds the verdicts to this: they are the same without these columns.
NOT_JUDGED = ("sm_occupancy", "temperature_celsius")
COLUMNS = ["timestamp", "gpu"] + IDENTITY + SIGNALS
#: Where the GPU sits beyond its socket, and how its NVLinks fare: a group, kept only where the input has
#: any of it (traces from gpulens exporters), so that a day of a fleet from other tools does not pay six
#: empty columns for it.
LINKS = [
    "pcie_root",
    "nvlink_group",
    "nvlink_links_down",
    "nvlink_crc_errors_per_second",
    "nvlink_replay_errors_per_second",
    "nvlink_recovery_errors_per_second",
]
#: The hardware or driver XID (core/metrics.py is_hardware_xid) a GPU reported since its previous row: its
#: code, the highest where several came, 0 for none. From gpulens' counters, a new event; from
#: dcgm-exporter's DCGM_FI_DEV_XID_ERRORS, the GPU's last code, which it repeats until it restarts. A group,
#: kept only where the input has it.
XIDS = ["hardware_xid"]
#: What the row's pod is, as Kubernetes says (the analyzer's kinds: docs/workloads.md), and the serving engine
#: it runs: text, like IDENTITY, kept only where the input has them (a trace written from a cluster that knew,
#: the simulator's). Without them a file's pods are of unknown kind, judged from their GPU series alone.
WORKLOAD = ["workload_kind", "engine"]
#: Every column of text: the rest are numbers.
TEXT = ["gpu"] + IDENTITY + WORKLOAD
#: The shape of the activity since the GPU's previous row (core/activity.py), from the exporter's
#: histogram and counters: every driver sample the row stands for, not just its average. A group: all
#: present (traces from gpulens exporters, directly or through Prometheus) or none (other tools' files).
SHAPE = [
    "activity_samples",  # driver samples since the previous row
    "activity_idle_ratio",  # share of them at or below IDLE_BOUND
    "activity_low_ratio",  # ... at or below LOW_BOUND
    "activity_high_ratio",  # ... above HIGH_BOUND
    "activity_transitions",  # crossings of BUSY_LEVEL among them
    "steady_bursts",  # bursts among them that repeated the previous period
]
#: What the driver and firmware reserve of the GPU's memory (NVML's `reserved`, DCGM_FI_DEV_FB_RESERVED,
#: nvidia-smi's memory.reserved). Workloads can use memory_total_bytes less it: the one denominator of
#: a memory share, in the analyzer (analyzer/inputs/frame.py memory_capacity), the recording rule and the
#: dashboards (SIGNALS.md: capacity is used / (total - reserved)). A group, kept only where the input has it;
#: without it the total is the capacity.
MEMORY = ["memory_reserved_bytes"]
#: Every column a trace file may hold, in the order gpulens writes them.
ALL_COLUMNS = COLUMNS + WORKLOAD + LINKS + XIDS + SHAPE + MEMORY
#: The layouts of recordings older gpulens versions began, newest first (before MEMORY; before XIDS and
#: WORKLOAD): the recorder appends to them in their own layout.
OLDER_LAYOUTS = (COLUMNS + WORKLOAD + LINKS + XIDS + SHAPE, COLUMNS + LINKS + SHAPE)


def shape_row(before: Totals | None, after: Totals) -> dict[str, float]:
    """The SHAPE columns of a row, from the exporter's running totals at the previous row and at this one.
    Empty after a counter reset (an exporter restart) or without a previous row; ratios are absent when
    no sample came (the driver had nothing new)."""
    if before is None or any(a < b for a, b in zip(after, before, strict=True)):
        return {}
    n, idle, low, high, transitions, steady = (a - b for a, b in zip(after, before, strict=True))
    row = {"activity_samples": n, "activity_transitions": transitions, "steady_bursts": steady}
    if n > 0:
        row.update(activity_idle_ratio=idle / n, activity_low_ratio=low / n, activity_high_ratio=1 - high / n)
    return row


class CounterRates:
    """The per-second rate of each counter between its consecutive readings, by any key: None on the first
    reading and after a reset (an exporter restart). The recorder and the analyzer's exporter input read
    counters this way between rows."""

    def __init__(self) -> None:
        self._previous: dict[object, tuple[float, float]] = {}

    def rate(self, key: object, value: float, now: float) -> float | None:
        previous = self._previous.get(key)
        self._previous[key] = (now, value)
        if previous and now > previous[0] and value >= previous[1]:
            return (value - previous[1]) / (now - previous[0])
        return None


class NewXids:
    """The hardware XID a GPU reported between its consecutive readings of gpulens_gpu_xid_errors_total, by
    any key: the highest code whose count rose, 0 for none. A code's counter is born at its first event, so
    a code missing from the previous reading counts from 0. The first reading of a key is a baseline (None)
    unless `from_zero`: the recorder runs in the exporter, whose counts start with it."""

    def __init__(self, from_zero: bool = False) -> None:
        self.from_zero = from_zero
        self._previous: dict[object, dict[str, float]] = {}

    def code(self, key: object, counts: dict[str, float]) -> float | None:
        """`counts`: the GPU's count by xid label now."""
        previous = self._previous.get(key)
        self._previous[key] = counts
        if previous is None and not self.from_zero:
            return None
        previous = previous or {}
        risen = [
            int(code)
            for code, count in counts.items()
            if code.isdigit() and m.is_hardware_xid(int(code)) and count > previous.get(code, 0.0)
        ]
        return float(max(risen, default=0))


#: Trace column <- the exporter gauge it is read from (by the recorder and the live inputs).
FROM_GAUGES: dict[str, m.MetricSpec] = {
    "gpu_util": m.UTILIZATION,
    "sm_active": m.SM_ACTIVE,
    "sm_occupancy": m.SM_OCCUPANCY,
    "tensor_active": m.TENSOR_ACTIVE,
    "dram_active": m.DRAM_ACTIVE,
    "gr_engine_active": m.GRAPHICS_ENGINE_ACTIVE,
    "fp16_active": m.FP16_ACTIVE,
    "fp32_active": m.FP32_ACTIVE,
    "fp64_active": m.FP64_ACTIVE,
    "memory_used_bytes": m.MEMORY_USED,
    "memory_total_bytes": m.MEMORY_TOTAL,
    "memory_reserved_bytes": m.MEMORY_RESERVED,
    "power_watts": m.POWER,
    "temperature_celsius": m.TEMPERATURE,
    "sm_clock_hertz": m.SM_CLOCK,
    "sm_clock_max_hertz": m.SM_CLOCK_MAX,
    "nvlink_links_down": m.NVLINK_LINKS_DOWN,
}
#: Trace column <- the exporter counter whose per-second rate it is.
FROM_RATES: dict[str, m.MetricSpec] = {
    "pcie_tx_bytes_per_second": m.PCIE_TRANSMIT,
    "pcie_rx_bytes_per_second": m.PCIE_RECEIVE,
    "nvlink_tx_bytes_per_second": m.NVLINK_TRANSMIT,
    "nvlink_rx_bytes_per_second": m.NVLINK_RECEIVE,
}
#: Trace column <- the values of gpulens_gpu_nvlink_errors_total's `type` label whose summed rate it is.
NVLINK_ERROR_RATES: dict[str, tuple[str, ...]] = {
    "nvlink_crc_errors_per_second": ("crc_flit", "crc_data"),
    "nvlink_replay_errors_per_second": ("replay",),
    "nvlink_recovery_errors_per_second": ("recovery",),
}
