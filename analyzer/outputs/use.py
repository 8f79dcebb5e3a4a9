"""What each unit used over a span (Use): its activity, memory and power in bins, and its peaks, which the
plan sizes from and the changes' outcomes are measured with, in memory that follows the units, not the span."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.sizing import Size, smallest
from gpulens.analyzer.outputs.timelines import TimelineBins, unit_samples
from gpulens.core.thresholds import Thresholds

#: Bins of use kept per unit over a span: memory that follows the units (8 KiB each), not the span.
MAX_BINS = 1024


class Use:
    """What each unit used, added a piece at a time (unit_samples()): its mean activity per GPU in the bins
    of `bins` (a report's span, or the live service's RollingTimelines), and the most memory one of its
    GPUs held."""

    def __init__(self, bins: TimelineBins):
        self.bins = bins
        self.peak_memory: dict[str, float] = {}

    @classmethod
    def over(cls, start: float, end: float, step: float, t: Thresholds) -> Use:
        """For a report of the span from `start` to `end` sampled every `step` seconds: bins of
        plan_load_bin_seconds, or the step, and at most MAX_BINS over the span."""
        width = max(t.plan_load_bin_seconds, step, (end - start) / MAX_BINS)
        return cls(TimelineBins(start, end, width, np.float32, points=MAX_BINS, columns=("activity",)))

    @classmethod
    def of_trace(cls, trace: pd.DataFrame, step: float, t: Thresholds, keys: UnitKeys | None = None) -> Use:
        """The use in a trace sampled every `step` seconds (`keys`: UnitKeys.of(trace), where the caller has
        it)."""
        if trace.empty:
            return cls.over(0.0, step, step, t)
        ts = trace["timestamp"]
        use = cls.over(float(ts.min()), float(ts.max()), step, t)
        use.add(unit_samples(trace, keys=keys))
        return use

    @property
    def bin_seconds(self) -> float:
        return self.bins.width

    def add(self, samples: pd.DataFrame) -> None:
        if samples.empty:
            return
        self.bins.add(samples)
        memory = pd.Series(samples["memory"].to_numpy() * samples["capacity"].to_numpy())
        for unit, peak in memory.groupby(samples["unit"].to_numpy()).max().items():
            if not math.isnan(peak):
                self.peak_memory[str(unit)] = max(self.peak_memory.get(str(unit), 0.0), float(peak))

    def merge(self, other: Use) -> None:
        """Add what `other` gathered over the same span (another process's share of a report's units)."""
        self.bins.merge(other.bins)
        self.merge_peaks(other.peak_memory)

    def merge_peaks(self, peaks: Mapping[str, float]) -> None:
        """Add the most memory (bytes) other readers saw each unit's GPUs hold."""
        for unit, peak in peaks.items():
            self.peak_memory[unit] = max(self.peak_memory.get(unit, 0.0), float(peak))

    def retain(self, units: set[str]) -> None:
        """Forget every unit but `units` (a live service's, as its history forgets them)."""
        self.bins.retain(units)
        self.peak_memory = {unit: peak for unit, peak in self.peak_memory.items() if unit in units}

    def size_of(self, v: Verdict, t: Thresholds, prices: dict[str, float] | None = None) -> Size:
        """The smallest GPU `v`'s unit fits (sizing.smallest), from its highest bin of activity and its peak
        memory."""
        activity = self.activity(v.unit)
        peak = math.nan if np.isnan(activity).all() else float(np.nanmax(activity))
        memory = self.peak_memory.get(v.unit, math.nan)
        return smallest(v.gpu_model, peak, memory, self.bin_seconds, t, prices, v.engine, v.gpus[0] if v.gpus else "")

    def idle_spells(self, unit: str, t: Thresholds) -> list[float]:
        """How long (seconds) each run of the unit's bins lasted whose mean activity stayed under idle_activity:
        its rests as its samples show them, to a bin (a notebook's 6-minute pause between cells is 6 minutes
        here, where a report's history books whole steps of it). A bin without samples ends a run."""
        quiet = self.activity(unit) < t.idle_activity  # NaN compares False
        edges = np.diff(np.concatenate(([0], quiet.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        return [float(n) * self.bin_seconds for n in ends - starts]

    def first_and_last(self, unit: str) -> tuple[float, float] | None:
        """The start of the first bin with a sample of the unit and the end of the last (unix seconds); None
        where it has none."""
        row = self.bins.rows.get(unit)
        if row is None:
            return None
        order = self.bins.order()
        counts = self.bins.sums[row][len(self.bins.columns) :, order].sum(axis=0)
        seen = np.flatnonzero(counts > 0)
        if not len(seen):
            return None
        middles = self.bins.middles(order[[seen[0], seen[-1]]])
        return float(middles[0] - self.bin_seconds / 2), float(middles[1] + self.bin_seconds / 2)

    def held_and_worked(self, unit: str, start: float, end: float, step: float) -> tuple[float, float]:
        """The GPU-seconds the unit held between `start` and `end` (unix seconds) and the GPU-seconds of them that
        did work (activity), from its samples taken every `step` seconds (held_by_bin(), summed)."""
        _, held, worked = self.held_by_bin(unit, start, end, step)
        return float(held.sum()), float(worked.sum())

    def held_by_bin(
        self, unit: str, start: float, end: float, step: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """In each bin, in time order: the seconds of it between `start` and `end`, and in them the GPU-seconds the
        unit held and those that did work (activity), from its samples taken every `step` seconds. A bin the
        window cuts counts for the share of it the window covers; zeros where the unit has no samples."""
        order = self.bins.order()
        lows = self.bins.middles(order) - self.bin_seconds / 2
        covered = np.clip(np.minimum(lows + self.bin_seconds, end) - np.maximum(lows, start), 0.0, None)
        row = self.bins.rows.get(unit)
        if row is None:
            return covered, np.zeros(len(order)), np.zeros(len(order))
        share = covered / self.bin_seconds
        k, counts = self.bins.columns.index("activity"), len(self.bins.columns)
        sums = self.bins.sums[row][:, order].astype(float)
        return covered, sums[k + counts] * share * step, sums[k] * share * step

    def activity(self, unit: str) -> np.ndarray:
        """The unit's mean activity per GPU in each bin, in time order; NaN where it has no sample."""
        order = self.bins.order()
        row = self.bins.rows.get(unit)
        if row is None:
            return np.full(len(order), np.nan)
        k, counts = self.bins.columns.index("activity"), len(self.bins.columns)
        sums = self.bins.sums[row][:, order].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums[k] / sums[k + counts]
