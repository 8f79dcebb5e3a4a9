"""The trace as a pandas DataFrame: every column of the schema (gpulens.core.trace) with its dtype.

Every input of the analyzer (files, Prometheus, exporters, the evaluator's simulation) ends in
normalize(), so the features and the classifier see one shape whatever the data came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpulens.core.config import atomic_output
from gpulens.core.trace import COLUMNS, IDENTITY, LINKS, SHAPE, SIGNALS, XIDS


def empty() -> pd.DataFrame:
    return normalize(pd.DataFrame({c: [] for c in COLUMNS}))


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column present with its proper dtype: categorical strings for identity, floats for signals.

    Columns already of the right dtype are kept as they are, not copied: a day of a large fleet is
    gigabytes, and the caller's frame is never modified (pandas copies on write)."""
    frame = frame.copy(deep=False)
    for column in ["gpu"] + IDENTITY:
        frame[column] = _identity(frame[column]) if column in frame else _blank(len(frame))
    # The LINKS, XIDS and SHAPE groups are kept only where the input has them: a day of a fleet from other
    # tools does not pay six empty columns for each.
    groups = [column for group in (LINKS, XIDS, SHAPE) if any(c in frame for c in group) for column in group]
    for column in SIGNALS + groups:
        if column not in frame:
            frame[column] = np.nan
        elif frame[column].dtype != np.float64:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    if frame["timestamp"].dtype != np.float64:
        frame["timestamp"] = frame["timestamp"].astype("float64")
    return frame[COLUMNS + groups]


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


def write_trace(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a trace (CSV, or Parquet by suffix) atomically: a crash never leaves half a file."""
    with atomic_output(path) as tmp:
        if Path(path).suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
