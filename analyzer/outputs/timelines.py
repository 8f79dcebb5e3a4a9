"""Each unit's timeline over a span: activity, memory and power per sample (unit_samples), averaged into
bins a piece at a time (TimelineBins) or over the live service's rolling history (RollingTimelines). The HTML
report and the page at / draw them; the plan reads each unit's use from them (analyzer/outputs/use.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.core.catalog import model_info

#: Points per timeline: bins of the span, each the mean of its samples.
POINTS = 360

#: What a timeline draws per sample: activity (0-1), memory used and power drawn as shares of the GPU's
#: memory and of its model's power limit (NaN on a MIG instance, whose board's power is shared), and the
#: memory capacity in bytes (the scale the memory line is drawn against).
TIMELINE_COLUMNS = ("activity", "memory", "power", "capacity")


def unit_samples(
    trace: pd.DataFrame,
    units: Iterable[str] | None = None,
    keys: UnitKeys | None = None,
    where: np.ndarray | None = None,
) -> pd.DataFrame:
    """What the timelines draw, one row per sample of `units` (None: all) among the rows `where` holds
    (None: all): its unit (as verdicts name it), unix seconds, and TIMELINE_COLUMNS. `keys`:
    UnitKeys.of(trace), where the caller has it."""
    if trace.empty:
        return pd.DataFrame({"unit": [], "ts": [], **{c: [] for c in TIMELINE_COLUMNS}})
    keys = keys or UnitKeys.of(trace)
    names = keys.names(trace)
    rows = np.isin(names, list(units))[keys.unit] if units is not None else np.ones(len(trace), dtype=bool)
    if where is not None:
        rows &= where
    drawn = trace[rows]
    # Each GPU's power limit (its model's; NaN for a MIG instance or an unknown model), looked up once per GPU.
    codes, gpus = pd.factorize(drawn["gpu"])
    first = np.zeros(len(gpus), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    models = drawn["gpu_model"].to_numpy()[first]
    limit = np.array(
        [
            math.nan if fr.is_mig(str(m), str(g)) else model_info(str(m)).power_limit_watts
            for m, g in zip(models, gpus, strict=True)
        ],
        dtype=np.float64,
    )
    limit[~(limit > 0)] = math.nan  # a model the catalogue does not know has no limit: its power is not drawn
    power = drawn["power_watts"].to_numpy(dtype=float) / limit[codes]
    capacity = fr.memory_capacity(drawn)[0]
    return pd.DataFrame(
        {
            "unit": names[keys.unit[rows]],
            "ts": drawn["timestamp"].to_numpy(),
            "activity": fr.activity(drawn).to_numpy(),
            "memory": drawn["memory_used_bytes"].to_numpy() / capacity,
            "power": power,
            "capacity": capacity,
        }
    )


class TimelineBins:
    """Each unit's timeline samples averaged into POINTS bins of a span (none shorter than the sampling
    step), added a piece at a time: what a report read from a store draws, in memory that follows the
    units (11 KiB each), not the span. Each piece is summed in one pass over its samples, whatever the
    number of units in it."""

    def __init__(
        self,
        start: float,
        end: float,
        step: float,
        dtype: type = np.float64,
        points: int = POINTS,
        columns: tuple[str, ...] = TIMELINE_COLUMNS,
    ):
        self.start = start
        self.width = max(step, (end - start) / points)  # seconds a bin covers
        self.bins = min(points, int((end - start) // self.width) + 1)
        self.columns = columns
        #: unit -> its row of `sums`.
        self.rows: dict[str, int] = {}
        #: Per unit row and bin: the sums of each of `columns`, then their counts.
        self.sums: np.ndarray = np.zeros((0, 2 * len(columns), self.bins), dtype=dtype)

    def _bins(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bin of each sample at unix seconds `ts`, and which samples to keep: all, in the span's bins."""
        return np.clip(((ts - self.start) // self.width).astype(np.int64), 0, self.bins - 1), np.ones(len(ts), bool)

    def middles(self, bins: np.ndarray) -> np.ndarray:
        """Unix seconds of the middle of `bins`."""
        return self.start + (bins + 0.5) * self.width

    def order(self) -> np.ndarray:
        """The bins in time order."""
        return np.arange(self.bins)

    def retain(self, units: set[str]) -> None:
        """Forget every unit but `units` (those the service's history still holds)."""
        kept = [(unit, row) for unit, row in self.rows.items() if unit in units]
        if len(kept) == len(self.rows):
            return
        self.sums = self.sums[[row for _, row in kept]].copy()
        self.rows = {unit: k for k, (unit, _) in enumerate(kept)}

    def merge(self, other: TimelineBins) -> None:
        """Add what `other` gathered (bins of the same span and width: another process's share of a report)."""
        if (other.start, other.width, other.bins, other.columns) != (self.start, self.width, self.bins, self.columns):
            raise ValueError("timelines of another span or width cannot be merged")
        self.merge_rows(list(other.rows), other.sums[list(other.rows.values())])

    def merge_rows(self, units: list[str], sums: np.ndarray) -> None:
        """Add the sums of `units` (`sums`' rows, in their order; bins of this span and width, as another
        TimelineBins or a shard file holds them: analyzer/runs/shards.py)."""
        rows = np.array([self.rows.setdefault(unit, len(self.rows)) for unit in units], dtype=np.intp)
        self._grow()
        np.add.at(self.sums, rows, sums)

    def _grow(self) -> None:
        """Room in `sums` for every unit of `rows`, doubling."""
        if len(self.rows) > len(self.sums):
            grown = np.zeros((max(len(self.rows), 2 * len(self.sums)), *self.sums.shape[1:]), dtype=self.sums.dtype)
            grown[: len(self.sums)] = self.sums
            self.sums = grown

    def add(self, samples: pd.DataFrame) -> None:
        if samples.empty:
            return
        bins, keep = self._bins(samples["ts"].to_numpy(dtype=float))
        codes, names = pd.factorize(samples["unit"])
        rows = np.array([self.rows.setdefault(str(name), len(self.rows)) for name in names])
        self._grow()
        cells = rows[codes] * self.bins + bins
        size = len(self.sums) * self.bins
        counts = len(self.columns)
        for k, column in enumerate(self.columns):
            values = samples[column].to_numpy(dtype=float)
            seen = keep & ~np.isnan(values)
            self.sums[:, k] += np.bincount(cells[seen], weights=values[seen], minlength=size).reshape(-1, self.bins)
            self.sums[:, k + counts] += np.bincount(cells[seen], minlength=size).reshape(-1, self.bins)

    def samples(self, units: Iterable[str]) -> pd.DataFrame:
        """unit_samples() of `units`: one row per bin that had samples, at the bin's middle, oldest first."""
        parts = []
        counts, order = len(self.columns), self.order()
        for unit in units:
            row = self.rows.get(unit)
            if row is None:
                continue
            sums = self.sums[row][:, order].astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                means = sums[:counts] / sums[counts:]
            held = sums[counts:].sum(axis=0) > 0
            columns = {c: means[k][held] for k, c in enumerate(self.columns)}
            parts.append(pd.DataFrame({"unit": unit, "ts": self.middles(order[held]), **columns}))
        return pd.concat(parts, ignore_index=True) if parts else unit_samples(pd.DataFrame())


class RollingTimelines(TimelineBins):
    """TimelineBins of the last `span` seconds, moving on with the samples: the live service's timelines.
    A ring of bins: a bin the newest samples reach again is cleared first. In float32 (a timeline is
    drawn in 100 px, not read to 7 digits): 11.5 KiB a unit."""

    def __init__(self, span: float, step: float):
        super().__init__(0.0, span, step, dtype=np.float32)
        #: The bin of time (unix seconds // width) each slot of the ring holds; -1: none yet.
        self.held = np.full(self.bins, -1, dtype=np.int64)

    def _bins(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        when = (ts // self.width).astype(np.int64)  # the bin of time of each sample
        slots = when % self.bins
        latest = np.full(self.bins, -1, dtype=np.int64)
        np.maximum.at(latest, slots, when)
        # A slot that a newer bin of time reaches holds that bin from now on: its old sums are cleared.
        moved = latest > self.held
        self.sums[:, :, moved] = 0
        self.held = np.maximum(self.held, latest)
        # Samples older than the ring reaches, or than what their slot now holds, are not drawn.
        return slots, (when > self.held.max() - self.bins) & (when == self.held[slots])

    def order(self) -> np.ndarray:
        """The slots that hold a bin of the last `span`, oldest first."""
        current = np.flatnonzero((self.held >= 0) & (self.held > self.held.max() - self.bins))
        return current[np.argsort(self.held[current])]

    def middles(self, bins: np.ndarray) -> np.ndarray:
        return (self.held[bins] + 0.5) * self.width
