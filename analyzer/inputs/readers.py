"""Read what engineers already recorded into a trace, whatever tool recorded it.

Formats are recognised by their first line:
- gpulens trace CSV (docs/trace-format.md) or Parquet;
- `nvidia-smi --query-gpu=... --format=csv -l 1` (or `-lms`) logs: units inside values ("116.51 W"),
  `[N/A]` and `[Requested functionality has been deprecated]` become missing values; nvidia-smi writes
  local time without a zone, read as UTC;
- `dcgmi dmon -e 1001,252 ...` CSV logs (EntityId, GRACT, FBUSD, TimeStamp);
- saved dcgm-exporter scrapes (one file per scrape, in the order given, --scrape-interval apart).

Every reader refuses a file it cannot read truthfully with one TraceError naming the file, the line (or
Parquet row) and the column: a value of the wrong type, or one no GPU can report (a negative or infinite
number, a ratio outside 0-1, more memory used than the GPU has, a time outside 1970-9999). A file is
refused whole rather than read with rows skipped: its bad values come from a tool or a pipeline that is
broken, and a verdict on the rest would look sound while resting on data that is not. Text is UTF-8
(a byte-order mark is allowed), and no line may pass MAX_LINE_CHARS, so a file of another kind cannot
take gigabytes of memory for one line.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
import stat
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.core import dcgm
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.times import rfc3339
from gpulens.core.trace import ALL_COLUMNS, TEXT

log = logging.getLogger(__name__)

MIB = 1024**2
#: The longest line read from a text file. Trace lines are well under 1 KiB; a longer line is a file of
#: another kind, and reading it whole could take gigabytes (a 2 GB line took 4.3 GB before this bound).
MAX_LINE_CHARS = 1 << 20
#: The largest saved scrape read: dcgm-exporter answers about 100 KiB for eight GPUs.
MAX_SCRAPE_BYTES = 64 << 20

# nvidia-smi query-gpu column (without unit) -> (trace column, factor)
_SMI = {
    "utilization.gpu": ("gpu_util", 0.01),
    "memory.used": ("memory_used_bytes", MIB),
    "memory.total": ("memory_total_bytes", MIB),
    "memory.reserved": ("memory_reserved_bytes", MIB),
    "power.draw": ("power_watts", 1.0),
    "temperature.gpu": ("temperature_celsius", 1.0),
    "clocks.sm": ("sm_clock_hertz", 1e6),
    "clocks.current.sm": ("sm_clock_hertz", 1e6),
    "clocks.max.sm": ("sm_clock_max_hertz", 1e6),
    "clocks.max.sm_clock": ("sm_clock_max_hertz", 1e6),
}
# dcgmi dmon field short name -> (trace column, factor)
_DMON = {
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
_NUMBER = re.compile(r"^\s*(-?[0-9.]+(?:[eE][-+]?\d+)?)")


class TraceError(ValueError):
    """A data file gpulens cannot read truthfully: where (file; line, or row of a Parquet file; column)
    and what is wrong, as one line: "gpu.csv, line 3, column 3 (sm_active): 'high' is not a number"."""

    def __init__(
        self, path: str | Path, problem: str, *, line: int | None = None, row: int | None = None, column: str = ""
    ) -> None:
        self.path, self.problem, self.line, self.row, self.column = str(path), problem, line, row, column
        where = [self.path]
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"row {row}")
        if column:
            where.append(f"column {column}")
        super().__init__(f"{', '.join(where)}: {problem}")


#: Unix seconds as tools write them (ASCII digits, an exponent allowed; a sign, inf and nan read, for the
#: check of the times a trace may hold to refuse by name), and RFC 3339 as it is written:
#: the other forms Python would read (week dates, "nan", digits of other scripts, a date alone, a time
#: without its zone) are other times than the writer meant, or none.
_UNIX_SECONDS = re.compile(r"\s*[+-]?([0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?|inf|infinity|nan)\s*", re.IGNORECASE)
_RFC3339 = re.compile(
    r"\s*[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})\s*"
)


def parse_timestamp(text: str) -> float:
    """Unix seconds, or RFC 3339 (with Z or an offset) as unix seconds; ValueError for anything else."""
    if _UNIX_SECONDS.fullmatch(text):
        return float(text)
    if not _RFC3339.fullmatch(text):
        raise ValueError("neither unix seconds nor RFC 3339 with its zone (2026-11-21T10:00:00Z)")
    return datetime.fromisoformat(text.strip().upper().replace("Z", "+00:00")).timestamp()


# --- text, bounded ----------------------------------------------------------------------------------
def _cut_short(path: Path, what: str) -> None:
    """Say that the last line of `path` has no end of line, and is skipped: every writer ends its rows with
    one, so it is a row cut short (a crash while writing), which read would be a smaller number."""
    log.warning(
        "%s: its last line has no end of line: a %s cut short (a crash while writing?) is skipped, not read as "
        "a smaller number; end the file with a newline if it is whole",
        path,
        what,
    )


def _lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (a byte-order mark dropped), none longer than MAX_LINE_CHARS. A last
    line without an end of line (past the header) is skipped as cut short (_cut_short)."""
    try:
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror})") from e
    with handle:
        number = 0
        while True:
            number += 1
            try:
                line = handle.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError:
                # Text is decoded a block at a time: the bad byte is on this line or shortly after it.
                raise TraceError(path, "not UTF-8 text (at this line or shortly after)", line=number) from None
            except OSError as e:
                raise TraceError(path, f"cannot read it ({e.strerror})", line=number) from e
            if not line:
                return
            if len(line) > MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
                raise TraceError(path, f"a line longer than {MAX_LINE_CHARS // 1024} KiB: not a trace", line=number)
            if number > 1 and not line.endswith(("\n", "\r")):  # only the last line can lack one
                _cut_short(path, "row")
                return
            yield line


def _csv_rows(path: Path, skip_initial_space: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each record of a CSV file, blank lines skipped; TraceError naming the line
    for broken quoting or a field longer than csv's limit (128 KiB)."""
    reader = csv.reader(_lines(path), skipinitialspace=skip_initial_space)
    available = available_memory()
    most = available // REPORT_BYTES_PER_ROW  # refused as rows come, not once the memory is gone
    rows = 0
    try:
        for fields in reader:
            if fields:
                rows += 1
                if rows > most + 1:  # the header is a record too
                    raise _too_many_rows(path, most, available, reader.line_num)
                yield reader.line_num, fields
    except csv.Error as e:
        problem = f"a field longer than {csv.field_size_limit() // 1024} KiB" if "field limit" in str(e) else str(e)
        raise TraceError(path, f"not CSV: {problem}", line=reader.line_num or 1) from None


def _header(path: Path, rows: Iterator[tuple[int, list[str]]], what: str) -> list[str]:
    """The first record, stripped, each name once; TraceError for an empty file or a repeated name."""
    first = next(rows, None)
    if first is None:
        raise TraceError(path, f"empty file; {what} starts with a header line")
    header = [h.strip() for h in first[1]]
    repeated = sorted(name for name, count in Counter(header).items() if count > 1)  # linear: headers may be huge
    if repeated:
        raise TraceError(path, f"column(s) {_some(repeated)} appear more than once in the header", line=first[0])
    return header


def _some(names: list[str], shown: int = 10) -> str:
    """Names as an error lists them: the first `shown`, and how many more."""
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _column(header: list[str], name: str) -> str:
    """How an error names a column of a CSV file: its position from 1 and its name."""
    return f"{header.index(name) + 1} ({name})"


# --- values no GPU can report -----------------------------------------------------------------------
def check_values(
    frame: pd.DataFrame,
    path: str | Path,
    lines: np.ndarray | None = None,
    source: Mapping[str, tuple[str, float]] | None = None,
) -> pd.DataFrame:
    """`frame` (normalized) when every value in it is one a GPU can report; otherwise TraceError naming the
    first impossible one. `lines` holds each row's line in the file (None: Parquet rows, numbered from 1);
    `source` maps a trace column to the column of the file it came from, as (the name an error shows, the
    factor from the file's unit to the trace's), for the files of other tools."""
    source = source or {}

    def check(bad: np.ndarray, column: str, problem: str) -> None:
        if not bad.any():
            return
        i = int(np.argmax(bad))
        label, factor = source.get(column, (column, 1.0))
        value = frame[column].iat[i]
        shown = f"{value / factor:g}" if isinstance(value, float) else repr(value)
        place = {"row": i + 1} if lines is None else {"line": int(lines[i])}
        raise TraceError(path, problem.format(value=shown, factor=factor, row=i), column=label, **place)

    for column, kind, rows in fr.impossible(frame):
        problem = fr.PROBLEMS[kind]
        if kind == "ratio" and source.get(column, ("", 1.0))[1] == 0.01:
            problem = "{value} is not a percentage from 0 to 100"
        elif kind in ("memory", "reserved") and rows.any():
            factor = source.get("memory_total_bytes", ("", 1.0))[1]
            total = frame["memory_total_bytes"].to_numpy()[rows][0] / factor
            problem = problem.replace("{total}", f"{total:g}")
        check(rows, column, problem)
    return frame


# --- the formats ------------------------------------------------------------------------------------
def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace CSV or Parquet file, checking every value; TraceError on the first bad one."""
    path = Path(path)
    return _read_parquet(path) if path.suffix == ".parquet" else _read_trace_csv(path)


def _read_trace_csv(path: Path) -> pd.DataFrame:
    rows = _csv_rows(path)
    header = _header(path, rows, "a trace")
    for required in ("timestamp", "gpu"):
        if required not in header:
            raise TraceError(
                path, f"required column '{required}' missing from the header ({', '.join(header)})", line=1
            )
    known = set(ALL_COLUMNS)
    unknown = [h for h in header if h not in known]
    if unknown:
        raise TraceError(
            path,
            f"unknown column(s) {_some(unknown)}; the trace columns are listed in docs/trace-format.md",
            line=1,
        )
    numeric = [i for i, h in enumerate(header) if h not in TEXT and h != "timestamp"]
    names = [i for i, h in enumerate(header) if h in TEXT]
    ts_index = header.index("timestamp")
    # Column by column as the rows are read: numbers in arrays of doubles, names as codes into each
    # column's distinct values. A list of rows of Python objects took 14 to 19 times the file's size.
    stamps, lines = array("d"), array("q")
    values = {i: array("d") for i in numeric}
    codes = {i: array("q") for i in names}
    known_names: dict[int, dict[str, int]] = {i: {} for i in names}
    pods = known_names.get(header.index("pod")) if "pod" in header else None
    for line, fields in rows:
        if len(fields) != len(header):
            raise TraceError(path, f"{len(fields)} fields, the header has {len(header)}", line=line)
        try:
            stamps.append(parse_timestamp(fields[ts_index]))
        except ValueError:
            raise TraceError(
                path,
                f"{fields[ts_index]!r} is neither unix seconds nor an RFC 3339 time",
                line=line,
                column=_column(header, "timestamp"),
            ) from None
        for i in numeric:
            text = fields[i].strip()
            try:
                values[i].append(float(text) if text else math.nan)
            except ValueError:
                raise TraceError(
                    path, f"{text!r} is not a number", line=line, column=f"{i + 1} ({header[i]})"
                ) from None
        for i in names:
            seen = known_names[i]
            code = seen.get(fields[i])
            if code is None:
                code = seen[fields[i]] = len(seen)
                if seen is pods and code >= fr.MAX_UNITS:  # refused as names come, not once all are read
                    found = f"more than {fr.MAX_UNITS:,} pods by this line"
                    raise TraceError(path, fr.too_many_units(found), line=line)
            codes[i].append(code)
        lines.append(line)
    columns: dict[str, Any] = {"timestamp": np.frombuffer(stamps, dtype=np.float64)}
    columns |= {header[i]: np.frombuffer(values[i], dtype=np.float64) for i in numeric}
    columns |= {
        header[i]: pd.Categorical.from_codes(
            np.frombuffer(codes[i], dtype=np.int64), categories=pd.Index(list(known_names[i]))
        )
        for i in names
    }
    frame = fr.normalize(pd.DataFrame({h: columns[h] for h in header}, copy=False))  # its own columns: shared
    source = {name: (f"{i + 1} ({name})", 1.0) for i, name in enumerate(header)}
    return check_values(frame, path, np.frombuffer(lines, dtype=np.int64), source)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def available_memory() -> int:
    """Bytes this process may still take: the kernel's MemAvailable, less where an address-space limit
    (ulimit -v) is lower."""
    import resource

    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    return available if limit == resource.RLIM_INFINITY else min(available, limit)


#: Bytes a report holds for each row of a trace while it judges it, whatever the trace's width (its frame
#: takes every column of the schema): 668 measured on a trace of 3 columns, 827 on one of 13 (peak RSS of
#: `gpulens report` on 576,000 and 1,152,000 rows, the difference over the rows). The lower figure, so that no
#: trace that fits is refused.
REPORT_BYTES_PER_ROW = 650


def _too_many_rows(path: Path, rows: int, available: int, line: int | None = None) -> TraceError:
    """The refusal of a trace of `rows` rows (more than that by `line`, where one is given) that a report could
    not hold in the `available` bytes."""
    found = f"more than {rows:,} rows by this line" if line is not None else f"holds {rows:,} rows"
    return TraceError(
        path,
        f"{found}, about {_mib(rows * REPORT_BYTES_PER_ROW)} once judged ({REPORT_BYTES_PER_ROW} bytes a row), more "
        f"than the {_mib(available)} of memory available: report on a shorter span or fewer GPUs (split the file), "
        "or on a machine with more memory",
        line=line,
    )


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    try:
        # What the report would hold, from the file's footer, before any row is read: Parquet compresses a
        # column of repeated values to almost nothing, so a file of megabytes can hold billions of rows.
        layout = pq.ParquetFile(path).metadata
        available = available_memory()
        if layout.num_rows * REPORT_BYTES_PER_ROW > available:
            raise _too_many_rows(path, layout.num_rows, available)
        table = pq.read_table(path)
        if "pod" in table.column_names:  # counted before pandas builds the frame
            import pyarrow.compute as pc

            pods = len(pc.unique(table.column("pod")))  # dictionary-encoded (categorical) columns too
            if pods > fr.MAX_UNITS:
                raise TraceError(path, fr.too_many_units(f"{pods:,} pods in the file"))
    except TraceError:
        raise
    except Exception as e:  # pyarrow raises several types; all mean "not a readable Parquet trace"
        raise TraceError(path, f"not a readable Parquet file ({e})") from e
    names = table.column_names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TraceError(path, f"column(s) {', '.join(repeated)} appear more than once")
    # Arrow's buffers are freed column by column as pandas takes them: a day of a fleet is gigabytes,
    # and holding both copies at once would double the peak.
    frame = table.to_pandas(self_destruct=True, split_blocks=True)
    del table
    missing = {"timestamp", "gpu"} - set(frame.columns)
    if missing:
        raise TraceError(path, f"required column(s) {', '.join(sorted(missing))} missing")
    unknown = [str(c) for c in frame.columns if c not in ALL_COLUMNS]
    if unknown:
        raise TraceError(
            path, f"unknown column(s) {', '.join(unknown)}; the trace columns are listed in docs/trace-format.md"
        )
    for column in frame.columns.difference(["timestamp"] + TEXT):
        dtype = frame[column].dtype
        if not (pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)):
            raise TraceError(path, f"holds {dtype} values; numbers are expected", column=column)
    frame["timestamp"] = _parquet_times(path, frame["timestamp"])
    if frame["gpu"].isna().any():
        row = int(np.argmax(frame["gpu"].isna().to_numpy())) + 1
        raise TraceError(path, "empty; every row needs its GPU's UUID or index", row=row, column="gpu")
    return check_values(fr.normalize(frame), path)


def _parquet_times(path: Path, stamps: pd.Series) -> pd.Series:
    """Unix seconds from a Parquet timestamp column: numbers, Arrow timestamps (without a zone: UTC),
    or RFC 3339 text."""
    if pd.api.types.is_datetime64_any_dtype(stamps.dtype):
        if getattr(stamps.dt, "tz", None) is None:
            stamps = stamps.dt.tz_localize("UTC")
        epoch = pd.Timestamp(0, tz="UTC")
        return (stamps - epoch) / pd.Timedelta(seconds=1)
    if pd.api.types.is_numeric_dtype(stamps.dtype) and not pd.api.types.is_bool_dtype(stamps.dtype):
        return stamps.astype("float64")
    values = []
    for row, value in enumerate(stamps, start=1):
        try:
            values.append(parse_timestamp(str(value)))
        except ValueError:
            raise TraceError(
                path, f"{value!r} is neither unix seconds nor an RFC 3339 time", row=row, column="timestamp"
            ) from None
    return pd.Series(values, index=stamps.index, dtype="float64")


#: What a path that is not a regular file is, as the error names it.
_NOT_FILES = (
    (stat.S_ISFIFO, "a FIFO (a named pipe, or a shell's <(...))"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def detect(path: Path) -> str:
    """The format of a file, from its first line (see the module's docstring). Only a regular file: a FIFO
    or a device would block or never end, and each file is opened more than once (its format, then its rows)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = stat.S_IFREG  # a file that is not there: its reader says so, in its own words
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _NOT_FILES if test(mode)), "not a regular file")
        raise TraceError(
            path,
            f"{kind}: gpulens reads a file, and reads it more than once (for its format, then its rows); "
            "write what it holds to a file and give that",
        )
    if path.suffix == ".parquet":
        return "trace"
    first = next(_lines(path), "")
    if not first.strip():
        raise TraceError(path, "empty: no header and no row; a trace starts with its header (docs/trace-format.md)")
    header = [h.strip() for h in first.split(",")]
    if "timestamp" in header and "gpu" in header:
        return "trace"
    if header[0] == "timestamp":
        return "nvidia-smi"
    if header[:1] == ["EntityId"] or first.lstrip("#").split()[:1] == ["Entity"]:
        return "dcgmi-dmon"
    if first.startswith("# HELP DCGM_") or first.startswith("DCGM_FI_"):
        return "dcgm-exporter"
    raise TraceError(
        path,
        "not a format gpulens reads (a gpulens trace CSV, or Parquet named *.parquet, an nvidia-smi --query-gpu "
        "CSV log, a dcgmi dmon CSV, or a dcgm-exporter scrape)",
        line=1,
    )


def read_files(
    paths: list[str | Path], scrape_interval: float = 30.0, gpu_model: str = "", scrape_start: float | None = None
) -> pd.DataFrame:
    """All files as one trace. Scrapes of dcgm-exporter are read as one series, in the given order,
    `scrape_interval` seconds apart from `scrape_start` (unix seconds; None: the first one's modification
    time)."""
    frames: list[tuple[str, pd.DataFrame]] = []
    scrapes = []
    for path in map(Path, paths):
        kind = detect(path)
        if kind == "trace":
            frames.append((str(path), read_trace(path)))
        elif kind == "nvidia-smi":
            frames.append((str(path), read_nvidia_smi(path)))
        elif kind == "dcgmi-dmon":
            frames.append((str(path), read_dcgmi_dmon(path)))
        else:
            scrapes.append(path)
    if scrapes:
        frames.append((str(scrapes[0]), read_dcgm_scrapes(scrapes, scrape_interval, scrape_start)))
    return combine(frames, gpu_model)


def _refuse_one_gpu_told_twice(parts: list[tuple[str, pd.DataFrame]]) -> None:
    """TraceError when a GPU UUID is in two files over overlapping spans, one on another node than the other
    or one knowing the pods that held it and the other not, naming both files and what each says."""
    seen: dict[str, tuple[str, float, float, frozenset[str], frozenset[str]]] = {}
    for name, part in parts:
        if part.empty:
            continue
        uuids = part["gpu"].astype(str).str.startswith(("GPU-", "MIG-")).to_numpy()
        if not uuids.any():
            continue
        rows = part.loc[uuids, ["gpu", "node", "namespace", "pod", "timestamp"]].astype({"gpu": str})
        for key, held in rows.groupby("gpu", sort=False):
            gpu, first, last = str(key), float(held["timestamp"].min()), float(held["timestamp"].max())
            nodes = frozenset(held["node"].astype(str))
            pods = frozenset(f"{ns}/{pod}" for ns, pod in zip(held["namespace"], held["pod"], strict=True) if pod)
            if gpu not in seen:
                seen[gpu] = (name, first, last, nodes, pods)
                continue
            other, other_first, other_last, other_nodes, other_pods = seen[gpu]
            overlap = first <= other_last and other_first <= last
            if overlap and (nodes != other_nodes or bool(pods) != bool(other_pods)):
                raise TraceError(
                    name,
                    f"GPU {gpu} is also in {other} over the same span, {_told(other_nodes, other_pods)} there and "
                    f"{_told(nodes, pods)} here: two records of one GPU would count it twice, once as a GPU no pod "
                    "holds; give one of the files (a gpulens recording has the node and the pods)",
                )


def _told(nodes: frozenset[str], pods: frozenset[str]) -> str:
    """What a file says of a GPU: its node and the pods that held it (the first three)."""
    where = f"on {', '.join(sorted(nodes))}" if any(nodes) else "on no node"
    named = sorted(pods)
    held = ", ".join(named[:3]) + (f" and {len(named) - 3} more" if len(named) > 3 else "")
    return f"{where}, held by {held}" if named else f"{where}, held by no pod"


def combine(parts: list[tuple[str, pd.DataFrame]], gpu_model: str = "") -> pd.DataFrame:
    """The frames read from files (each with its file's name) as one trace. A row that repeats another of
    the same GPU and time (the same file given twice, logs that overlap) is kept once; two that disagree
    refuse the read, naming both (TraceError): judged, they would make the GPU switch at every sample.
    `gpu_model` names the GPUs whose files did not. One GPU (by UUID, which no two GPUs share) recorded
    by two files over one span as held by different pods or on different nodes (a gpulens trace and an
    nvidia-smi log of the same GPU: the log knows no node or pod) refuses the read: judged, the same GPU
    would be counted twice, once as a phantom no pod holds."""
    _refuse_one_gpu_told_twice(parts)
    frame = pd.concat([part for _, part in parts], ignore_index=True) if parts else fr.empty()
    if gpu_model:
        models = frame["gpu_model"].astype(str)
        frame["gpu_model"] = models.where(models != "", gpu_model)
    # Files name different GPUs and pods: the concatenation's identity columns are categorical again.
    frame = fr.normalize(frame)
    key = ["node", "gpu", "timestamp"]
    repeated = frame.duplicated(subset=key, keep=False).to_numpy()
    if not repeated.any():
        return frame
    distinct = frame[repeated].drop_duplicates()
    clash = distinct.duplicated(subset=key, keep=False).to_numpy()
    if clash.any():
        first, second = _clashing_pair(distinct[clash], key)
        starts = np.cumsum([0] + [len(part) for _, part in parts])

        def where(index: int) -> tuple[str, int]:
            k = int(np.searchsorted(starts, index, side="right")) - 1
            return parts[k][0], index - int(starts[k]) + 1

        (first_file, first_row), (file, row) = where(first), where(second)
        a, b = frame.loc[first], frame.loc[second]
        differ = [c for c in frame.columns if not (a[c] == b[c] or (pd.isna(a[c]) and pd.isna(b[c])))]
        node = f" on {a['node']}" if a["node"] else ""
        when = rfc3339(float(frame["timestamp"].to_numpy()[first]))
        raise TraceError(
            file,
            f"GPU {a['gpu']}{node} at {when} again, with another {', '.join(differ)} "
            f"than in {first_file}, row {first_row}: the same GPU twice, or GPUs of two nodes without their node; "
            "give each GPU once (a node column, or one node's files per report)",
            row=row,
        )
    return frame[~frame.duplicated(subset=key).to_numpy()].reset_index(drop=True)


def _clashing_pair(rows: pd.DataFrame, key: list[str]) -> tuple[int, int]:
    """The index labels of the first two rows of `rows` with the same key (rows sorted as in the frame)."""
    groups = rows.groupby(key, observed=True, sort=False).indices
    first_group = min(groups.values(), key=lambda positions: positions[0])
    return int(rows.index[first_group[0]]), int(rows.index[first_group[1]])


def _number(text: str) -> float:
    """'116.51 W' -> 116.51; '[N/A]', '[Requested functionality has been deprecated]' -> NaN."""
    match = _NUMBER.match(text)
    try:
        return float(match.group(1)) if match else math.nan
    except ValueError:  # "1.2.3": digits and dots that are no number
        return math.nan


def read_nvidia_smi(path: Path) -> pd.DataFrame:
    rows = _csv_rows(path, skip_initial_space=True)
    header = _header(path, rows, "an nvidia-smi log")
    names = [re.sub(r"\s*\[.*\]$", "", h) for h in header]
    given: dict[str, list[str]] = {}  # what each column gives, and the columns that give it
    for name, text in zip(names, header, strict=True):
        active_reasons = name in ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
        field = "clock_event_reasons" if active_reasons else _SMI.get(name, (name,))[0]
        given.setdefault(field, []).append(text)
    twice = next((columns for columns in given.values() if len(columns) > 1), None)
    if twice:
        raise TraceError(
            path, f"columns {twice[0]!r} and {twice[1]!r} give the same value: keep one in --query-gpu", line=1
        )
    if "timestamp" not in names:
        raise TraceError(path, "an nvidia-smi log needs the timestamp column (--query-gpu=timestamp,...)", line=1)
    identity = next((c for c in ("uuid", "index", "pci.bus_id") if c in names), None)
    if identity is None:
        raise TraceError(path, "add uuid (or index) to --query-gpu so samples can be told apart by GPU", line=1)
    signals = sorted({v[0] for v in _SMI.values()})
    out: dict[str, list[Any]] = {c: [] for c in ["timestamp", "gpu", "gpu_model", *signals, "clock_event_reasons"]}
    lines = array("q")
    for line, row in rows:
        if len(row) != len(header):
            raise TraceError(path, f"{len(row)} fields, the header has {len(header)}", line=line)
        values = dict(zip(names, (v.strip() for v in row), strict=True))
        stamp = values["timestamp"]
        try:
            day = datetime.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")
            fraction = float("0." + stamp.partition(".")[2]) if "." in stamp else 0.0
        except ValueError:
            raise TraceError(
                path,
                f"{stamp!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm",
                line=line,
                column=_column(header, header[names.index("timestamp")]),
            ) from None
        out["timestamp"].append(day.replace(tzinfo=UTC).timestamp() + fraction)
        out["gpu"].append(values[identity])
        out["gpu_model"].append(values.get("name", ""))
        seen = set()
        for name, (column, factor) in _SMI.items():
            if name in values and column not in seen:
                out[column].append(_number(values[name]) * factor)
                seen.add(column)
        for column in set(signals) - seen:
            out[column].append(math.nan)
        reasons = values.get("clocks_event_reasons.active", values.get("clocks_throttle_reasons.active", ""))
        try:
            out["clock_event_reasons"].append(int(reasons, 16) if reasons.startswith("0x") else math.nan)
        except ValueError:
            raise TraceError(path, f"{reasons!r} is not a hexadecimal bitmask", line=line) from None
        lines.append(line)
    source = {
        column: (_column(header, header[names.index(name)]), factor)
        for name, (column, factor) in _SMI.items()
        if name in names
    }
    return check_values(fr.normalize(pd.DataFrame(out)), path, np.frombuffer(lines, dtype=np.int64), source)


def read_dcgmi_dmon(path: Path) -> pd.DataFrame:
    """dcgmi dmon in CSV form: EntityId plus field short names (GRACT, SMACT, DRAMA, FBUSD, ...)."""
    rows = _csv_rows(path, skip_initial_space=True)
    header = [h.lstrip("#").strip() for h in _header(path, rows, "a dcgmi dmon CSV")]
    if "EntityId" not in header or "TimeStamp" not in header:
        raise TraceError(path, "a dcgmi dmon CSV needs EntityId and TimeStamp columns", line=1)
    known = {i: _DMON[h] for i, h in enumerate(header) if h in _DMON}
    entity, stamp = header.index("EntityId"), header.index("TimeStamp")
    out: dict[str, list[Any]] = {"timestamp": [], "gpu": [], **{column: [] for column, _ in known.values()}}
    lines = array("q")
    for line, row in rows:
        if len(row) != len(header):
            raise TraceError(path, f"{len(row)} fields, the header has {len(header)}", line=line)
        try:
            out["timestamp"].append(float(row[stamp]))
        except ValueError:
            raise TraceError(
                path, f"{row[stamp]!r} is not unix seconds", line=line, column=_column(header, "TimeStamp")
            ) from None
        out["gpu"].append(row[entity].strip())
        for i, (column, factor) in known.items():
            # dcgmi prints N/A for a field the GPU does not report: missing, as in every other format.
            out[column].append(_number(row[i]) * factor)
        lines.append(line)
    source = {column: (_column(header, header[i]), factor) for i, (column, factor) in known.items()}
    return check_values(fr.normalize(pd.DataFrame(out)), path, np.frombuffer(lines, dtype=np.int64), source)


def read_dcgm_scrapes(paths: list[Path], interval: float, start: float | None = None) -> pd.DataFrame:
    """Saved dcgm-exporter scrapes, in the given order, `interval` seconds apart from `start` (unix seconds;
    None: the first file's modification time, when it was saved)."""
    if start is None:
        try:
            start = paths[0].stat().st_mtime
        except OSError as e:
            raise TraceError(paths[0], f"cannot read it ({e.strerror})") from e
    return pd.concat([_read_scrape(path, start + k * interval) for k, path in enumerate(paths)], ignore_index=True)


def _read_scrape(path: Path, timestamp: float) -> pd.DataFrame:
    try:
        if path.stat().st_size > MAX_SCRAPE_BYTES:
            raise TraceError(path, f"larger than {MAX_SCRAPE_BYTES // MIB} MiB: not one dcgm-exporter scrape")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror})") from e
    except UnicodeDecodeError:
        raise TraceError(path, "not UTF-8 text") from None
    if text and not text.endswith("\n"):  # the exposition format ends every line with one
        _cut_short(path, "sample")
        text = text[: text.rfind("\n") + 1]
    devices = dcgm.devices_from_rows(dcgm.parse_exposition(text).rows)
    if not devices:
        raise TraceError(
            path, "no GPU in it: no DCGM_FI_ sample carries the UUID label dcgm-exporter gives each GPU's rows"
        )
    rows = []
    for (uuid, gi), d in devices.items():
        value = {spec: v for (spec, extra), v in d.values.items() if not extra}
        rows.append(
            {
                "timestamp": timestamp,
                "gpu": uuid if gi is None else f"{uuid}/gi{gi}",
                "gpu_model": d.model,
                "namespace": d.pod.namespace if d.pod else "",
                "pod": d.pod.pod if d.pod else "",
                "container": d.pod.container if d.pod else "",
                # Every column the exporter's metrics feed (core/trace.py), as a store's series are read: a field
                # dcgm-exporter maps to one of them (core/dcgm.py) is in the trace, whichever it is.
                **{column: value.get(spec) for column, spec in tr.FROM_GAUGES.items()},
                **{column: d.rates.get(spec) for column, spec in tr.FROM_RATES.items()},
                "clock_event_reasons": d.clock_event_reasons,
                "hardware_xid": None if d.last_xid is None else (d.last_xid if m.is_hardware_xid(d.last_xid) else 0),
            }
        )
    # A scrape's rows have no lines of their own: an impossible value is named by its row (the GPUs in
    # the order of the scrape) and trace column.
    return check_values(fr.normalize(pd.DataFrame(rows)), path)
