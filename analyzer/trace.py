"""The trace: gpulens' one representation of GPU telemetry over time, which every input produces.

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
          numa_node                                 CPU socket the GPU hangs off (poor placement)

Any signal column may be absent or empty: the analyzer says what it could not judge without it.
"""
from __future__ import annotations

import csv
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from gpulens.core import metrics as m

IDENTITY = ["node", "gpu_model", "namespace", "pod", "container"]
RATIOS = ["gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "gr_engine_active",
          "fp16_active", "fp32_active", "fp64_active"]
NUMBERS = ["memory_used_bytes", "memory_total_bytes", "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second",
           "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second", "power_watts", "temperature_celsius",
           "sm_clock_hertz", "sm_clock_max_hertz", "clock_event_reasons", "cpu_usage_cores", "cpu_limit_cores",
           "restarts_total", "numa_node"]
SIGNALS = RATIOS + NUMBERS
COLUMNS = ["timestamp", "gpu"] + IDENTITY + SIGNALS


#: Trace column <- the exporter gauge it is read from (by the recorder and the live inputs).
FROM_GAUGES: dict[str, m.MetricSpec] = {
    "gpu_util": m.UTILIZATION, "sm_active": m.SM_ACTIVE, "sm_occupancy": m.SM_OCCUPANCY,
    "tensor_active": m.TENSOR_ACTIVE, "dram_active": m.DRAM_ACTIVE, "gr_engine_active": m.GRAPHICS_ENGINE_ACTIVE,
    "fp16_active": m.FP16_ACTIVE, "fp32_active": m.FP32_ACTIVE, "fp64_active": m.FP64_ACTIVE,
    "memory_used_bytes": m.MEMORY_USED, "memory_total_bytes": m.MEMORY_TOTAL, "power_watts": m.POWER,
    "temperature_celsius": m.TEMPERATURE, "sm_clock_hertz": m.SM_CLOCK, "sm_clock_max_hertz": m.SM_CLOCK_MAX,
}
#: Trace column <- the exporter counter whose per-second rate it is.
FROM_RATES: dict[str, m.MetricSpec] = {
    "pcie_tx_bytes_per_second": m.PCIE_TRANSMIT, "pcie_rx_bytes_per_second": m.PCIE_RECEIVE,
    "nvlink_tx_bytes_per_second": m.NVLINK_TRANSMIT, "nvlink_rx_bytes_per_second": m.NVLINK_RECEIVE,
}


class TraceError(ValueError):
    """A trace file is malformed. The message names the file, line and column, and what was expected."""


def empty() -> pd.DataFrame:
    return normalize(pd.DataFrame({c: [] for c in COLUMNS}))


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column present with its proper dtype: strings for identity, floats for signals."""
    frame = frame.copy()
    for column in IDENTITY:
        frame[column] = frame[column].fillna("").astype(str) if column in frame else ""
    frame["gpu"] = frame["gpu"].astype(str)
    for column in SIGNALS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64") if column in frame else np.nan
    frame["timestamp"] = frame["timestamp"].astype("float64")
    return frame[COLUMNS]


def parse_timestamp(text: str) -> float:
    """Unix seconds, or RFC 3339 (with Z or an offset) as unix seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("RFC 3339 timestamps need a time zone (Z or +hh:mm)")
    return value.timestamp()


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace CSV or Parquet file, checking every value; raises TraceError on the first bad one."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as e:  # pyarrow raises several types; all mean "not a readable Parquet trace"
            raise TraceError(f"{path}: not a readable Parquet file ({e})") from e
        missing = {"timestamp", "gpu"} - set(frame.columns)
        if missing:
            raise TraceError(f"{path}: required column(s) {', '.join(sorted(missing))} missing")
        if frame["timestamp"].dtype == object:
            frame["timestamp"] = [parse_timestamp(str(v)) for v in frame["timestamp"]]
        return normalize(frame)
    try:
        handle = open(path, newline="")
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror})") from e
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}: empty file; a trace needs a header line with timestamp and gpu") from None
        except csv.Error as e:
            raise TraceError(f"{path}, line 1: {e}") from e
        for required in ("timestamp", "gpu"):
            if required not in header:
                raise TraceError(f"{path}, line 1: required column '{required}' missing from the header "
                                 f"({', '.join(header)})")
        unknown = [h for h in header if h not in COLUMNS]
        if unknown:
            raise TraceError(f"{path}, line 1: unknown column(s) {', '.join(unknown)}; "
                             "the trace columns are listed in docs/trace-format.md")
        numeric = [i for i, h in enumerate(header) if h in SIGNALS]
        ts_index = header.index("timestamp")
        rows = []
        try:
            for row in reader:
                line = reader.line_num
                if not row:
                    continue
                if len(row) != len(header):
                    raise TraceError(f"{path}, line {line}: {len(row)} fields, the header has {len(header)}")
                try:
                    row[ts_index] = parse_timestamp(row[ts_index])
                except ValueError:
                    raise TraceError(f"{path}, line {line}, column {ts_index + 1} (timestamp): {row[ts_index]!r} is "
                                     "neither unix seconds nor an RFC 3339 time") from None
                for i in numeric:
                    text = row[i].strip()
                    if text == "":
                        row[i] = math.nan
                        continue
                    try:
                        row[i] = float(text)
                    except ValueError:
                        raise TraceError(f"{path}, line {line}, column {i + 1} ({header[i]}): {text!r} is not a "
                                         "number") from None
                    name = header[i]
                    if name in RATIOS and not 0.0 <= row[i] <= 1.0:
                        raise TraceError(f"{path}, line {line}, column {i + 1} ({name}): {text} is not a ratio "
                                         "from 0 to 1 (percentages must be divided by 100)")
                rows.append(row)
        except csv.Error as e:
            raise TraceError(f"{path}, line {reader.line_num}: {e}") from e
    return normalize(pd.DataFrame(rows, columns=header))


def write_trace(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a trace (CSV, or Parquet by suffix) atomically: a crash never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix == ".parquet":
        frame.to_parquet(tmp, index=False)
    else:
        frame.to_csv(tmp, index=False)
    tmp.replace(path)
