"""The trace as a pandas DataFrame: every column of the schema (gpulens.core.trace) with its dtype.

Every input of the analyzer (files, Prometheus, exporters, the evaluator's simulation) ends in
normalize(), so the features and the classifier see one shape whatever the data came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs.kinds import ENGINES, KINDS
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND
from gpulens.core.catalog import model_info
from gpulens.core.config import atomic_output
from gpulens.core.times import rfc3339
from gpulens.core.trace import COLUMNS, IDENTITY, LINKS, MEMORY, RATIOS, SHAPE, SIGNALS, TEXT, WORKLOAD, XIDS

#: Times a trace may hold: unix seconds from 1970 to the end of year 9999 (the last RFC 3339 can write).
LATEST_TIMESTAMP = 253402300800.0
#: Columns holding identifiers, which may be negative (NVML's -1 for an unknown CPU socket).
IDS = {"numa_node", "pcie_root", "nvlink_group"}
RATIO_COLUMNS = RATIOS + [c for c in SHAPE if c.endswith("_ratio")]
#: The largest value of a column that any GPU (or its pod) reports, with room to spare; above it a value
#: is a broken exporter's or pipeline's (1e308 watts). Every other number: at most LARGEST.
MAXIMA = {
    "memory_used_bytes": 2.0**44,  # 16 TiB: over 50 times the largest GPU's memory (B300, 288 GB)
    "memory_total_bytes": 2.0**44,
    "memory_reserved_bytes": 2.0**44,
    "power_watts": 1e4,  # 10 kW: 7 times a B300's 1.4 kW
    "temperature_celsius": 200.0,  # GPUs shut down near 100 C
    "sm_clock_hertz": 1e10,  # 10 GHz: over 3 times any GPU's boost clock
    "sm_clock_max_hertz": 1e10,
}
LARGEST = 1e15  # a petabyte a second, a quadrillion events: no GPU counter comes near

#: What is wrong with a value, by the kind `impossible` gives: the text errors and logs say after it.
PROBLEMS = {
    "gpu": "empty; every row needs its GPU's UUID or index",
    "timestamp": "{value} is not a time from 1970 to 9999",
    "ratio": "{value} is not a ratio from 0 to 1 (percentages must be divided by 100)",
    "value": "{value} is not a value a GPU reports",
    "memory": "{value} is more memory than the GPU has ({total})",
    "reserved": "{value} reserved is all the memory the GPU has ({total}) or more: nothing left to use",
    "kind": "{value} is not a workload kind: " + ", ".join(KINDS) + " (or empty)",
    "engine": "{value} is not a serving engine gpulens reads: " + ", ".join(ENGINES) + " (or empty)",
}
#: The values each WORKLOAD column may hold.
WORKLOAD_VALUES = {"workload_kind": ("", *KINDS), "engine": ("", *ENGINES)}


#: Units (pods, and GPUs no pod holds) one report judges at most: each costs about 20 KB while it is judged
#: (50,000 took 1 GiB), so a million tiny pods would take 20 GB. Past it the report is refused, saying why.
MAX_UNITS = 200_000


def require_few_enough(units: int, counted: str = "pods and GPUs without a pod to judge") -> None:
    """ValueError, naming the bound and the fix, when a report would judge more than MAX_UNITS units
    (`units` of what `counted` says)."""
    if units > MAX_UNITS:
        raise ValueError(too_many_units(f"{units:,} {counted}"))


def too_many_units(found: str) -> str:
    """The refusal of a report of more than MAX_UNITS units, after `found` (what was counted)."""
    return (
        f"{found}: one report judges at most {MAX_UNITS:,} (about 20 KB each); report a shorter span (files: "
        "fewer at a time, or split by time; a store: --since, --until)"
    )


def empty() -> pd.DataFrame:
    return normalize(pd.DataFrame({c: [] for c in COLUMNS}))


def concat(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Two trace frames in (GPU, time) order, the second's rows later than the first's, as one in that order
    (each GPU's rows together, as a read gives them), identity columns still categorical (pd.concat makes
    strings of categoricals whose categories differ, millions of them). In that order a unit of one GPU is
    in the (unit, GPU, time) order judging reads rows in, so no window pass gathers its columns
    (features.UnitKeys): one order here, where a report's piece (the rows it carried, then those it read)
    cost each of its four passes a sort and a gather of every column. Built a column at a time, so that it
    holds one copy of the rows beside its inputs, as a concatenation does."""
    if first.empty or second.empty:
        return normalize(second if first.empty else first)
    first, second = normalize(first), normalize(second)
    # A GPU is its node and its index there, both categorical in a normalized frame.
    node, gpu = (pd.api.types.union_categoricals([first[n], second[n]], ignore_order=True) for n in ("node", "gpu"))
    columns: dict[str, pd.Categorical | np.ndarray] = {"node": node, "gpu": gpu}
    node_code, gpu_code = (np.asarray(c.codes, dtype=np.int64) for c in (node, gpu))
    # Stable: a GPU's rows of the first frame stay before its rows of the second, each in time order.
    order = np.argsort(node_code * (max(int(gpu_code.max()), 0) + 1) + gpu_code, kind="stable")
    del node, gpu, node_code, gpu_code
    for name in [*first.columns, *(c for c in second.columns if c not in first)]:
        joined = columns.pop(name, None)
        if joined is None:
            joined = _joined(_column(first, name), _column(second, name))
        columns[name] = joined.take(order)
    return normalize(pd.DataFrame(columns, copy=False))


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A column of `frame`, or NaN where it has none (as pd.concat fills it)."""
    return frame[name] if name in frame else pd.Series(np.nan, index=frame.index)


def _joined(first: pd.Series, second: pd.Series) -> pd.Categorical | np.ndarray:
    """One column's values of both frames, in their order: categories united where both are categorical."""
    if isinstance(first.dtype, pd.CategoricalDtype) and isinstance(second.dtype, pd.CategoricalDtype):
        return pd.api.types.union_categoricals([first, second], ignore_order=True)
    return pd.concat([first, second], ignore_index=True).to_numpy()


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column present with its proper dtype: categorical strings for identity, floats for signals.

    Columns already of the right dtype are kept as they are, not copied: a day of a large fleet is
    gigabytes, and the caller's frame is never modified (pandas copies on write)."""
    frame = frame.copy(deep=False)
    # The WORKLOAD, LINKS, XIDS, SHAPE and MEMORY groups are kept only where the input has them: a day of a
    # fleet from other tools does not pay six empty columns for each.
    groups = [
        column for group in (WORKLOAD, LINKS, XIDS, SHAPE, MEMORY) if any(c in frame for c in group) for column in group
    ]
    for column in ["gpu"] + IDENTITY + [c for c in groups if c in WORKLOAD]:
        frame[column] = _identity(frame[column]) if column in frame else _blank(len(frame))
    for column in SIGNALS + [c for c in groups if c not in WORKLOAD]:
        if column not in frame:
            frame[column] = np.nan
        elif frame[column].dtype != np.float64:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    if frame["timestamp"].dtype != np.float64:
        frame["timestamp"] = frame["timestamp"].astype("float64")
    wanted = COLUMNS + groups
    if list(frame.columns) == wanted:
        return frame
    # Columns picked by a list are copied (a piece of a report: a few hundred MB, once per normalize); a frame
    # of the same columns in the wanted order shares them.
    return pd.DataFrame({column: frame[column] for column in wanted}, copy=False)


def _identity(column: pd.Series) -> pd.Series:
    """An identity column as categorical strings, "" for missing. A fleet has a few thousand GPUs and pods
    in millions of rows: codes are a fraction of the strings' memory, and grouping by them costs nothing
    (features.UnitKeys)."""
    if isinstance(column.dtype, pd.CategoricalDtype) and pd.api.types.is_string_dtype(column.cat.categories):
        if not column.hasnans:
            return column
        if "" not in column.cat.categories:
            column = column.cat.add_categories("")
        return column.fillna("")
    return column.fillna("").astype(str).astype("category")


def _blank(rows: int) -> pd.Categorical[Any]:
    """An identity column the input does not have: "" on every row, as codes."""
    return pd.Categorical.from_codes(np.zeros(rows, dtype=np.int8), dtype=pd.CategoricalDtype([""]))


def has_shape(trace: pd.DataFrame) -> bool:
    """Whether the trace carries the exporter's activity shape (trace.SHAPE)."""
    return SHAPE[0] in trace


def activity(trace: pd.DataFrame) -> pd.Series:
    """Each sample's activity, 0-1: SM activity, else graphics-engine activity (MIG instances), else
    utilization (no profiling fields): the one measure of work every signature and waste figure uses."""
    return trace["sm_active"].fillna(trace["gr_engine_active"]).fillna(trace["gpu_util"])


def flop_utilization(trace: pd.DataFrame) -> pd.Series:
    """Each sample's Overall FLOP Utilization, 0-1: tensor-pipe activity times the SM clock over its maximum, the
    share of the GPU's peak tensor FLOPs its tensor cores delivered (Pedersen et al., "Instant GPU Efficiency
    Visibility at Fleet Scale", arXiv 2605.20799: within 2 points of a job's measured MFU once tile quantization is
    corrected, which this is not; FLOPs off the tensor cores are not counted). NaN where a field is missing: no
    profiling fields, no clocks."""
    clock = trace["sm_clock_hertz"] / trace["sm_clock_max_hertz"].where(trace["sm_clock_max_hertz"] > 0)
    return trace["tensor_active"] * clock.clip(upper=1.0)


def work(trace: pd.DataFrame) -> np.ndarray:
    """Each row's work, 0-1: the share of its interval a kernel ran, what sparse use is measured in (seconds
    of work, not rows that caught a blip). From the exporter's histogram where the row carries it (every
    driver sample since the row before): each bucket's share at its midpoint, so that a 50 ms health check
    caught by one 1/6 s sample at 30% counts 0.4 of that sample, not all of it. Else activity: a row
    estimates its interval (a 30 s row that catches a health check at 5% counts 1.5 s; DCGM averages its
    profiling fields over the interval, where utilization is a point sample)."""
    estimate = activity(trace).to_numpy()
    if not has_shape(trace):
        return estimate
    idle, low, high = (
        trace[c].to_numpy() for c in ("activity_idle_ratio", "activity_low_ratio", "activity_high_ratio")
    )
    midpoints = (
        (IDLE_BOUND + LOW_BOUND) / 2 * (low - idle)
        + (LOW_BOUND + HIGH_BOUND) / 2 * (1.0 - low - high)
        + (HIGH_BOUND + 1.0) / 2 * high
    )
    return np.where(trace["activity_samples"].to_numpy() > 0, midpoints, estimate)


def is_mig(model: str, gpu: str) -> bool:
    """Whether a GPU is a MIG instance (its model "... MIG 1g.10gb", a "MIG-…" UUID or a "0/gi7" key)."""
    return " MIG " in f"{model} " or gpu.startswith("MIG-") or "/gi" in gpu


def memory_capacity(trace: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each row's memory capacity in bytes, what workloads can use: the total less what the driver reserves
    (trace.MEMORY: the one denominator of a memory share, as the recording rule's and the dashboards'), the
    total alone where the input does not say what is reserved. Also where it came from the catalogue: without
    a total (dcgm-exporter without DCGM_FI_DEV_FB_FREE, a log without memory.total) the catalogue's figure for
    the GPU's model (core/catalog.py, as NVML reports it), or the most the GPU was seen using where that is
    more (a model the catalogue matches only by family, as an H100 NVL's 94 GB by "H100"). NaN for a MIG
    instance, whose capacity is its profile's, and for a model the catalogue does not know."""
    total = trace["memory_total_bytes"].to_numpy()
    if "memory_reserved_bytes" in trace:
        reserved = trace["memory_reserved_bytes"].to_numpy()
        # Only a reserve that leaves memory is taken off (one of all of it is no GPU's: `impossible`).
        total = np.where(reserved < total, total - reserved, total)
    used = trace["memory_used_bytes"].to_numpy()
    missing = np.isnan(total) & ~np.isnan(used)
    if not missing.any():
        return total, missing
    gpu = trace.groupby(["node", "gpu", "gpu_model"], observed=True, sort=False).ngroup().to_numpy()
    first = np.unique(gpu, return_index=True)[1]  # each GPU's first row, GPUs numbered 0..n-1
    catalogue = np.array(
        [
            np.nan if is_mig(str(model), str(name)) else float(model_info(str(model)).memory_total_bytes or np.nan)
            for model, name in zip(trace["gpu_model"].to_numpy()[first], trace["gpu"].to_numpy()[first], strict=True)
        ]
    )
    filled = np.where(np.isnan(catalogue), np.nan, np.fmax(catalogue, pd.Series(used).groupby(gpu).max().to_numpy()))
    return np.where(missing, filled[gpu], total), missing & ~np.isnan(filled[gpu])


def write_trace(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a trace (CSV, or Parquet by suffix) atomically: a crash never leaves half a file."""
    with atomic_output(path) as tmp:
        if Path(path).suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


def impossible(frame: pd.DataFrame) -> Iterator[tuple[str, str, np.ndarray]]:
    """Each (column, kind of PROBLEMS, rows) of values no GPU can report in a normalized frame: the one
    set of rules every input is held to. Files are refused for them (readers.check_values); the live
    inputs and Prometheus leave them out (without_impossible). NaN is a missing value, never impossible."""
    yield "gpu", "gpu", frame["gpu"].eq("").to_numpy(dtype=bool, na_value=False)
    for column in frame.columns.intersection(WORKLOAD):
        yield column, column.removeprefix("workload_"), ~frame[column].isin(WORKLOAD_VALUES[column]).to_numpy()
    stamps = frame["timestamp"].to_numpy()
    yield "timestamp", "timestamp", ~((stamps >= 0) & (stamps < LATEST_TIMESTAMP))
    for column in frame.columns.intersection(RATIO_COLUMNS):
        values = frame[column].to_numpy()
        yield column, "ratio", (values < 0) | (values > 1)
    for column in frame.columns.difference(["timestamp"] + TEXT + RATIO_COLUMNS):
        values = frame[column].to_numpy()
        negative = (values < 0) & (column not in IDS)
        yield column, "value", np.isinf(values) | negative | (np.abs(values) > MAXIMA.get(column, LARGEST))
    used, total = frame["memory_used_bytes"].to_numpy(), frame["memory_total_bytes"].to_numpy()
    yield "memory_used_bytes", "memory", used > total
    if "memory_reserved_bytes" in frame:
        yield "memory_reserved_bytes", "reserved", frame["memory_reserved_bytes"].to_numpy() >= total


def without_impossible(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], str]:
    """`frame` with the values no GPU can report (`impossible`) left out: a row without a GPU or a time is
    dropped, any other value blanked (missing, as if not sampled). Also the count left out by column, and
    the first one as a log line names it: "sm_active of GPU-1 on node-a at 2025-11-09T00:00:00Z: inf is not ..."."""
    counts: dict[str, int] = {}
    first = ""
    drop = np.zeros(len(frame), dtype=bool)
    blanks: dict[str, np.ndarray] = {}
    for column, kind, rows in impossible(frame):
        if not rows.any():
            continue
        counts[column] = counts.get(column, 0) + int(rows.sum())
        if not first:
            i = int(np.argmax(rows))
            value = frame[column].iat[i]
            total = frame["memory_total_bytes"].iat[i]
            problem = PROBLEMS[kind].format(
                value=f"{value:g}" if isinstance(value, float) else repr(value), total=f"{total:g}"
            )
            when = rfc3339(float(frame["timestamp"].to_numpy()[i]))
            where = f"{frame['gpu'].iat[i]} on {frame['node'].iat[i]} at {when}"
            first = f"{column} of {where}: {problem}"
        if kind in ("gpu", "timestamp"):
            drop |= rows
        else:
            blanks[column] = blanks.get(column, np.zeros(len(frame), dtype=bool)) | rows
    if not counts:
        return frame, counts, first
    frame = frame.copy(deep=False)
    for column, rows in blanks.items():
        if column in WORKLOAD:  # text: blank is ""
            frame[column] = _identity(frame[column].astype(str).where(~rows, ""))
        else:
            frame[column] = np.where(rows, np.nan, frame[column].to_numpy())
    return frame[~drop].reset_index(drop=True), counts, first
