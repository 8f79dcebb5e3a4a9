"""Read what engineers already recorded into a trace, whatever tool recorded it.

Formats are recognised by their first line:
- gpulens trace CSV (docs/trace-format.md) or Parquet;
- `nvidia-smi --query-gpu=... --format=csv -l 1` (or `-lms`) logs: units inside values ("116.51 W"),
  `[N/A]` and `[Requested functionality has been deprecated]` become missing values; nvidia-smi writes
  local time without a zone, read as UTC;
- `dcgmi dmon -e 1001,252 ...` CSV logs (EntityId, GRACT, FBUSD, TimeStamp);
- saved dcgm-exporter scrapes (one file per scrape, in the order given, --scrape-interval apart).
"""

from __future__ import annotations

import csv
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpulens.analyzer import frame as fr
from gpulens.core import dcgm
from gpulens.core import metrics as m
from gpulens.core.trace import ALL_COLUMNS, IDENTITY, RATIOS

MIB = 1024**2

# nvidia-smi query-gpu column (without unit) -> (trace column, factor)
_SMI = {
    "utilization.gpu": ("gpu_util", 0.01),
    "memory.used": ("memory_used_bytes", MIB),
    "memory.total": ("memory_total_bytes", MIB),
    "power.draw": ("power_watts", 1.0),
    "temperature.gpu": ("temperature_celsius", 1.0),
    "clocks.sm": ("sm_clock_hertz", 1e6),
    "clocks.current.sm": ("sm_clock_hertz", 1e6),
    "clocks.max.sm": ("sm_clock_max_hertz", 1e6),
    "clocks.max.sm_clock": ("sm_clock_max_hertz", 1e6),
}
_NUMBER = re.compile(r"^\s*(-?[0-9.]+(?:[eE][-+]?\d+)?)")


class TraceError(ValueError):
    """A trace file is malformed. The message names the file, line and column, and what was expected."""


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


def format_timestamp(unix: float) -> str:
    """RFC 3339 in UTC to the second ("2026-11-21T10:00:00Z"), as parse_timestamp reads it."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace CSV or Parquet file, checking every value; raises TraceError on the first bad one."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several types; all mean "not a readable Parquet trace"
            raise TraceError(f"{path}: not a readable Parquet file ({e})") from e
        # Arrow's buffers are freed column by column as pandas takes them: a day of a fleet is gigabytes,
        # and holding both copies at once would double the peak.
        frame = table.to_pandas(self_destruct=True, split_blocks=True)
        del table
        missing = {"timestamp", "gpu"} - set(frame.columns)
        if missing:
            raise TraceError(f"{path}: required column(s) {', '.join(sorted(missing))} missing")
        if frame["timestamp"].dtype == object:
            frame["timestamp"] = [parse_timestamp(str(v)) for v in frame["timestamp"]]
        return fr.normalize(frame)
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
                raise TraceError(
                    f"{path}, line 1: required column '{required}' missing from the header ({', '.join(header)})"
                )
        unknown = [h for h in header if h not in ALL_COLUMNS]
        if unknown:
            raise TraceError(
                f"{path}, line 1: unknown column(s) {', '.join(unknown)}; "
                "the trace columns are listed in docs/trace-format.md"
            )
        numeric = [i for i, h in enumerate(header) if h not in IDENTITY and h not in ("timestamp", "gpu")]
        ts_index = header.index("timestamp")
        rows = []
        try:
            for text_row in reader:
                line = reader.line_num
                if not text_row:
                    continue
                if len(text_row) != len(header):
                    raise TraceError(f"{path}, line {line}: {len(text_row)} fields, the header has {len(header)}")
                row: list[Any] = list(text_row)
                try:
                    row[ts_index] = parse_timestamp(row[ts_index])
                except ValueError:
                    raise TraceError(
                        f"{path}, line {line}, column {ts_index + 1} (timestamp): {row[ts_index]!r} is "
                        "neither unix seconds nor an RFC 3339 time"
                    ) from None
                for i in numeric:
                    text = row[i].strip()
                    if text == "":
                        row[i] = math.nan
                        continue
                    try:
                        row[i] = float(text)
                    except ValueError:
                        raise TraceError(
                            f"{path}, line {line}, column {i + 1} ({header[i]}): {text!r} is not a number"
                        ) from None
                    name = header[i]
                    if (name in RATIOS or name.endswith("_ratio")) and not 0.0 <= row[i] <= 1.0:
                        raise TraceError(
                            f"{path}, line {line}, column {i + 1} ({name}): {text} is not a ratio "
                            "from 0 to 1 (percentages must be divided by 100)"
                        )
                rows.append(row)
        except csv.Error as e:
            raise TraceError(f"{path}, line {reader.line_num}: {e}") from e
    return fr.normalize(pd.DataFrame(rows, columns=header))


def detect(path: Path) -> str:
    if path.suffix == ".parquet":
        return "trace"
    try:
        with open(path, errors="replace") as f:
            first = f.readline()
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror})") from e
    header = [h.strip() for h in first.split(",")]
    if "timestamp" in header and "gpu" in header:
        return "trace"
    if first.startswith("timestamp,") or first.startswith("timestamp ,"):
        return "nvidia-smi"
    if header[:1] == ["EntityId"] or first.lstrip("#").split()[:1] == ["Entity"]:
        return "dcgmi-dmon"
    if first.startswith("# HELP DCGM_") or first.startswith("DCGM_FI_"):
        return "dcgm-exporter"
    raise TraceError(
        f"{path}, line 1: not a format gpulens reads (a gpulens trace CSV, an nvidia-smi "
        "--query-gpu CSV log, a dcgmi dmon CSV, or a dcgm-exporter scrape)"
    )


def read_files(paths: list[str | Path], scrape_interval: float = 30.0, gpu_model: str = "") -> pd.DataFrame:
    """All files as one trace. Scrapes of dcgm-exporter are read as one series, in the given order."""
    frames, scrapes = [], []
    for path in map(Path, paths):
        kind = detect(path)
        if kind == "trace":
            frames.append(read_trace(path))
        elif kind == "nvidia-smi":
            frames.append(read_nvidia_smi(path))
        elif kind == "dcgmi-dmon":
            frames.append(read_dcgmi_dmon(path))
        else:
            scrapes.append(path)
    if scrapes:
        frames.append(read_dcgm_scrapes(scrapes, scrape_interval))
    frame = pd.concat(frames, ignore_index=True) if frames else fr.empty()
    if gpu_model:
        frame.loc[frame["gpu_model"] == "", "gpu_model"] = gpu_model
    return frame


def _number(text: str) -> float:
    """'116.51 W' -> 116.51; '[N/A]', '[Requested functionality has been deprecated]' -> NaN."""
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else math.nan


def read_nvidia_smi(path: Path) -> pd.DataFrame:
    with open(path, newline="") as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    header = [h.strip() for h in rows[0]]
    names = [re.sub(r"\s*\[.*\]$", "", h) for h in header]
    if "timestamp" not in names:
        raise TraceError(f"{path}, line 1: an nvidia-smi log needs the timestamp column (--query-gpu=timestamp,...)")
    identity = next((c for c in ("uuid", "index", "pci.bus_id") if c in names), None)
    if identity is None:
        raise TraceError(f"{path}, line 1: add uuid (or index) to --query-gpu so samples can be told apart by GPU")
    out: dict[str, list[Any]] = {
        c: []
        for c in ["timestamp", "gpu", "gpu_model"] + sorted({v[0] for v in _SMI.values()} | {"clock_event_reasons"})
    }
    for line, row in enumerate(rows[1:], start=2):
        if not row or len(row) != len(header):
            if row:
                raise TraceError(f"{path}, line {line}: {len(row)} fields, the header has {len(header)}")
            continue
        values = dict(zip(names, (v.strip() for v in row), strict=True))
        try:
            stamp = datetime.strptime(values["timestamp"].split(".")[0], "%Y/%m/%d %H:%M:%S")
        except ValueError:
            raise TraceError(
                f"{path}, line {line}, column {names.index('timestamp') + 1} (timestamp): "
                f"{values['timestamp']!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm"
            ) from None
        fraction = values["timestamp"].partition(".")[2]
        out["timestamp"].append(stamp.replace(tzinfo=UTC).timestamp() + (float("0." + fraction) if fraction else 0))
        out["gpu"].append(values[identity])
        out["gpu_model"].append(values.get("name", ""))
        seen = set()
        for name, (column, factor) in _SMI.items():
            if name in values and column not in seen:
                out[column].append(_number(values[name]) * factor)
                seen.add(column)
        for column in {v[0] for v in _SMI.values()} - seen:
            out[column].append(math.nan)
        reasons = values.get("clocks_event_reasons.active", values.get("clocks_throttle_reasons.active", ""))
        out["clock_event_reasons"].append(int(reasons, 16) if reasons.startswith("0x") else math.nan)
    return fr.normalize(pd.DataFrame(out))


def read_dcgmi_dmon(path: Path) -> pd.DataFrame:
    """dcgmi dmon in CSV form: EntityId plus field short names (GRACT, SMACT, DRAMA, FBUSD, ...)."""
    frame = pd.read_csv(path, skipinitialspace=True)
    frame.columns = [c.strip().lstrip("#") for c in frame.columns]
    if "EntityId" not in frame or "TimeStamp" not in frame:
        raise TraceError(f"{path}, line 1: a dcgmi dmon CSV needs EntityId and TimeStamp columns")
    fields = {
        "GRACT": ("gr_engine_active", 1.0),
        "SMACT": ("sm_active", 1.0),
        "SMOCC": ("sm_occupancy", 1.0),
        "TENSO": ("tensor_active", 1.0),
        "DRAMA": ("dram_active", 1.0),
        "GPUTL": ("gpu_util", 0.01),
        "FBUSD": ("memory_used_bytes", MIB),
        "FBTTL": ("memory_total_bytes", MIB),
        "POWER": ("power_watts", 1.0),
        "TMPTR": ("temperature_celsius", 1.0),
        "SMCLK": ("sm_clock_hertz", 1e6),
        "PCITX": ("pcie_tx_bytes_per_second", 1.0),
        "PCIRX": ("pcie_rx_bytes_per_second", 1.0),
    }
    out = pd.DataFrame(
        {"timestamp": pd.to_numeric(frame["TimeStamp"], errors="coerce"), "gpu": frame["EntityId"].astype(str)}
    )
    for short, (column, factor) in fields.items():
        if short in frame:
            out[column] = pd.to_numeric(frame[short], errors="coerce") * factor
    bad = out["timestamp"].isna()
    if bad.any():
        line = int(np.argmax(bad.to_numpy())) + 2
        raise TraceError(f"{path}, line {line}, column TimeStamp: not unix seconds")
    return fr.normalize(out)


def read_dcgm_scrapes(paths: list[Path], interval: float) -> pd.DataFrame:
    rows = []
    for k, path in enumerate(paths):
        parsed = dcgm.parse_exposition(path.read_text())
        if not parsed.rows:
            raise TraceError(f"{path}: no DCGM metrics in it")
        for (uuid, gi), d in dcgm.devices_from_rows(parsed.rows).items():
            value = {spec: v for (spec, extra), v in d.values.items() if not extra}
            rows.append(
                {
                    "timestamp": k * interval,
                    "gpu": uuid if gi is None else f"{uuid}/gi{gi}",
                    "gpu_model": d.model,
                    "namespace": d.pod.namespace if d.pod else "",
                    "pod": d.pod.pod if d.pod else "",
                    "container": d.pod.container if d.pod else "",
                    "gpu_util": value.get(m.UTILIZATION),
                    "sm_active": value.get(m.SM_ACTIVE),
                    "sm_occupancy": value.get(m.SM_OCCUPANCY),
                    "tensor_active": value.get(m.TENSOR_ACTIVE),
                    "dram_active": value.get(m.DRAM_ACTIVE),
                    "gr_engine_active": value.get(m.GRAPHICS_ENGINE_ACTIVE),
                    "memory_used_bytes": value.get(m.MEMORY_USED),
                    "memory_total_bytes": value.get(m.MEMORY_TOTAL),
                    "pcie_tx_bytes_per_second": d.rates.get(m.PCIE_TRANSMIT),
                    "pcie_rx_bytes_per_second": d.rates.get(m.PCIE_RECEIVE),
                    "power_watts": value.get(m.POWER),
                    "temperature_celsius": value.get(m.TEMPERATURE),
                    "sm_clock_hertz": value.get(m.SM_CLOCK),
                    "clock_event_reasons": d.clock_event_reasons,
                }
            )
    return fr.normalize(pd.DataFrame(rows))
